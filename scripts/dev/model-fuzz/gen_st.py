import json, os, shutil, struct, copy

WORK = os.environ.get('FUZZ_WORK', '/tmp/inferd-model-fuzz')
OUT = WORK + '/st'
FIX = os.path.join(os.path.dirname(os.path.abspath(__file__)), '../../../fixtures/models')
shutil.rmtree(OUT, ignore_errors=True)
os.makedirs(OUT)
cases = []

tok35 = json.load(open(f'{FIX}/qwen35_hybrid/tokenizer.json'))
tok512 = copy.deepcopy(tok35)
for i in range(256, 512):
    tok512['model']['vocab'][f'tok{i}'] = i
tok512['added_tokens'] = [{"id": 2, "content": "<|endoftext|>", "single_word": False, "lstrip": False,
                           "rstrip": False, "normalized": False, "special": True}]
tok512['model']['vocab']['<|endoftext|>'] = 2
del tok512['model']['vocab'][[k for k, v in tok35['model']['vocab'].items() if v == 2][0]]


def read_st(path):
    b = open(path, 'rb').read()
    n = struct.unpack('<Q', b[:8])[0]
    return json.loads(b[8:8 + n]), b[8 + n:]


def write_st(path, header, data, raw_header=None, header_len=None):
    hb = raw_header if raw_header is not None else json.dumps(header).encode()
    n = len(hb) if header_len is None else header_len
    open(path, 'wb').write(struct.pack('<Q', n) + hb + data)


def mk(name, base='llama', cfg=None, header=None, data=None, raw=None, tok='512', st_bytes=None,
       header_len=None, extra=None, raw_header=None, no_st=False):
    d = f'{OUT}/{name}'
    os.makedirs(d)
    c = json.load(open(f'{FIX}/{base}/config.json'))
    if cfg is not None:
        c = cfg(c)
    if raw is not None:
        open(f'{d}/config.json', 'w').write(raw)
    elif c is not None:
        json.dump(c, open(f'{d}/config.json', 'w'))
    h, dat = read_st(f'{FIX}/{base}/model.safetensors')
    if header is not None:
        h = header(h)
    if data is not None:
        dat = data(dat)
    if st_bytes is not None:
        open(f'{d}/model.safetensors', 'wb').write(st_bytes)
    elif not no_st:
        write_st(f'{d}/model.safetensors', h, dat, raw_header=raw_header, header_len=header_len)
    if tok == '512':
        json.dump(tok512, open(f'{d}/tokenizer.json', 'w'))
    elif tok == '256':
        json.dump(tok35, open(f'{d}/tokenizer.json', 'w'))
    elif tok is not None:
        open(f'{d}/tokenizer.json', 'w').write(tok)
    for fn, content in (extra or {}).items():
        open(f'{d}/{fn}', 'w').write(content)
    cases.append([f's_{name}', d])


def setk(**kw):
    def f(c):
        for k, v in kw.items():
            if v is DEL:
                c.pop(k, None)
            else:
                c[k] = v
        return c
    return f


DEL = object()


def ent(name, **kw):
    def f(h):
        for k, v in kw.items():
            if v is DEL:
                h[name].pop(k)
            else:
                h[name][k] = v
        return h
    return f


def drop(name):
    def f(h):
        del h[name]
        return h
    return f


ORIG = open(f'{FIX}/llama/model.safetensors', 'rb').read()
HL = struct.unpack('<Q', ORIG[:8])[0]

for base in ['llama', 'qwen2', 'qwen3']:
    mk(f'base_{base}', base=base)
mk('tok256_model512', tok='256')
# --- header bytes
for nm, v in [('huge', 1 << 40), ('max', (1 << 64) - 1), ('limit1', (100 << 20) + 1), ('filelen', len(ORIG)),
              ('zero', 0), ('plus1', HL + 1), ('minus1', HL - 1), ('seven', 7)]:
    mk(f'hlen_{nm}', st_bytes=struct.pack('<Q', v) + ORIG[8:])
for off in [0, 4, 8, 100, 8 + HL, 8 + HL + 1000, len(ORIG) - 1]:
    mk(f'trunc_{off}', st_bytes=ORIG[:off])
mk('notjson', st_bytes=ORIG[:8] + b'x' + ORIG[9:])
mk('json_array', raw_header=b'[1,2,3]')
mk('json_deep', raw_header=b'[' * 100000 + b']' * 100000)
mk('json_str', raw_header=b'"hello"')
mk('json_utf8bad', raw_header=b'{"\xff\xfe": 1}')
E = 'model.layers.0.self_attn.q_proj.weight'
for dt in ['F99', 'I8', 'F64', 'F16', 'U8', 'F8_E4M3', '']:
    mk(f'dtype_{dt or "empty"}', header=ent(E, dtype=dt))
mk('dtype_int', header=ent(E, dtype=5))
mk('shape_wrong_count', header=ent(E, shape=[64, 63]))
mk('shape_swapped_k', header=ent('model.layers.0.self_attn.k_proj.weight', shape=[64, 32]))
mk('shape_empty', header=ent('model.norm.weight', shape=[], data_offsets=[213504, 213506]))
mk('shape_3d', header=ent(E, shape=[4, 16, 64]))
mk('shape_neg', header=ent(E, shape=[-1, 64]))
mk('shape_huge', header=ent(E, shape=[1 << 62, 1 << 62]))
mk('shape_huge2', header=ent(E, shape=[(1 << 64) - 1, 2]))
mk('shape_zero', header=ent(E, shape=[0, 64], data_offsets=[127232, 127232]))
mk('shape_missing', header=ent(E, shape=DEL))
mk('off_reversed', header=ent(E, data_offsets=[135424, 127232]))
mk('off_out_of_range', header=ent(E, data_offsets=[10 ** 9, 10 ** 9 + 8192]))
mk('off_max', header=ent(E, data_offsets=[(1 << 64) - 8192, (1 << 64) - 1]))
mk('off_overflow', header=ent(E, data_offsets=[(1 << 64) - 1, (1 << 64) - 1 + 8192]))
mk('off_three', header=ent(E, data_offsets=[127232, 135424, 1]))
mk('off_overlap', header=ent(E, data_offsets=[119040, 127232]))
mk('off_odd', header=ent(E, data_offsets=[127233, 135425]))
mk('off_float', header=ent(E, data_offsets=[127232.0, 135424.0]))
mk('metadata_nonstr', header=lambda h: {**h, '__metadata__': {'format': 1}})
mk('metadata_list', header=lambda h: {**h, '__metadata__': [1]})
mk('extra_tensor_junk', header=lambda h: {**h, 'junk': {'dtype': 'F32', 'shape': [1], 'data_offsets': [0, 4]}})
for t in ['model.embed_tokens.weight', 'model.norm.weight', 'model.layers.1.self_attn.q_proj.weight',
          'model.layers.0.mlp.up_proj.weight']:
    mk(f'missing_{t}', header=drop(t))
# misaligned data start with F32 fixture (qwen3)
h3, d3 = read_st(f'{FIX}/qwen3/model.safetensors')
hb = json.dumps(h3).encode()
hb = hb + b' ' * ((-len(hb)) % 8 + 1)  # data_start = 8 + len ≡ 1 mod 8
mk('misaligned_f32', base='qwen3', raw_header=hb)
# --- config.json
for k, vals in [('hidden_size', [0, 63, 1 << 40, -1, 64.5, None]), ('num_attention_heads', [0, 3, 1 << 40, 8]),
                ('num_key_value_heads', [0, 3, 5, 1, 1 << 40]), ('head_dim', [0, 15, 1 << 40, None]),
                ('vocab_size', [0, 511, 513, 1 << 40, -1]),
                ('max_position_embeddings', [0, 1, 2, 1 << 62, -1, None]),
                ('rope_theta', [-1.0, 0.0, 1e-30, 1e38, 'NaN', None]),
                ('rms_norm_eps', [-1.0, 0.0, 1e30]),
                ('num_hidden_layers', [0, 3, 1 << 40, 1 << 32, (1 << 64) - 1, 1 << 26]),
                ('intermediate_size', [0, 1 << 40]),
                ('partial_rotary_factor', [0.0, 2.0, -1.0, 0.5, 0.3]),
                ('rope_scaling', [{'type': 'linear', 'factor': 2.0}, 'weird', {}, [], 0]),
                ('architectures', [[], ['Foo'], 'LlamaForCausalLM', None]),
                ('layer_types', [['full_attention'], ['sliding_attention', 'full_attention'], 'x']),
                ('tie_word_embeddings', [False]),
                ('attention_bias', [True]),
                ('eos_token_id', [100000, -1, [1, 2]]),
                ]:
    for v in vals:
        nm = json.dumps(v).replace('"', '').replace(' ', '')[:30] if v is not None else 'DEL'
        mk(f'cfg_{k}_{nm}', cfg=setk(**{k: DEL if v is None else v}))
mk('cfg_rope_theta_1e400', raw=open(f'{FIX}/llama/config.json').read().replace('"rope_theta": 10000.0', '"rope_theta": 1e400'))
mk('cfg_rope_params_theta_neg', cfg=setk(rope_theta=DEL, rope_parameters={'rope_theta': -5, 'rope_type': 'default'}))
mk('cfg_rope_params_type_yarn', cfg=setk(rope_parameters={'rope_theta': 1e4, 'rope_type': 'yarn', 'factor': 4}))
mk('cfg_no_heads_headdim_nodiv', cfg=setk(head_dim=DEL, num_attention_heads=3, num_key_value_heads=1))
mk('cfg_wrap_headdim', cfg=setk(head_dim=(1 << 62) + 8, num_attention_heads=8, num_key_value_heads=4))
mk('cfg_missing', cfg=lambda c: None)
mk('cfg_notjson', raw='{"hidden_size": 64,')
mk('cfg_array', raw='[1]')
mk('cfg_empty_obj', raw='{}')
mk('cfg_text_config', cfg=lambda c: {'architectures': ['LlamaForCausalLM'], 'text_config': c})
mk('cfg_text_config_notobj', cfg=lambda c: {'architectures': ['LlamaForCausalLM'], 'text_config': 5})
mk('cfg_model_type_only', cfg=setk(architectures=DEL))
# qwen35 safetensors config
for k, vals in [('linear_num_key_heads', [0, 3, 1 << 40]), ('linear_conv_kernel_dim', [0, 1, 1 << 40]),
                ('linear_key_head_dim', [0, (1 << 63) + 8]), ('full_attention_interval', [0, -1]),
                ('layer_types', [['linear_attention'] * 4, ['full_attention'] * 4, None]),
                ('num_hidden_layers', [1 << 40, 1]), ('partial_rotary_factor', [3.0]),
                ('hidden_act', ['gelu'])]:
    for v in vals:
        nm = json.dumps(v).replace('"', '').replace(' ', '')[:30] if v is not None else 'DEL'
        mk(f'q35cfg_{k}_{nm}', base='qwen35_hybrid', tok='256', cfg=setk(**{k: DEL if v is None else v}))
mk('q35_base', base='qwen35_hybrid', tok='256')
# --- tokenizer
mk('tok_missing', tok=None)
mk('tok_notjson', tok='{"version":')
mk('tok_empty_obj', tok='{}')
mk('tok_no_model', tok=json.dumps({k: v for k, v in tok512.items() if k != 'model'}))
t = copy.deepcopy(tok512); t['added_tokens'].append({"id": 100000, "content": "<big>", "single_word": False, "lstrip": False, "rstrip": False, "normalized": False, "special": True})
mk('tok_added_id_beyond_vocab', tok=json.dumps(t))
t = copy.deepcopy(tok512); t['model']['vocab']['huge'] = 4000000000
mk('tok_vocab_id_u32ish', tok=json.dumps(t))
t = copy.deepcopy(tok512); t['model']['vocab'] = {}
mk('tok_vocab_empty', tok=json.dumps(t))
mk('tokcfg_notjson', extra={'tokenizer_config.json': '{'})
mk('tokcfg_tmpl_int', extra={'tokenizer_config.json': json.dumps({'chat_template': 5})})
mk('tokcfg_tmpl_bad', extra={'tokenizer_config.json': json.dumps({'chat_template': '{% if %}'})})
mk('tokcfg_eos_unknown', extra={'tokenizer_config.json': json.dumps({'eos_token': '<nope>', 'bos_token': 7})})
mk('tokcfg_tmpl_list', extra={'tokenizer_config.json': json.dumps({'chat_template': [{'name': 'x'}]})})
# sharded index
mk('idx_missing_shard', extra={'model.safetensors.index.json': json.dumps({'weight_map': {'model.norm.weight': 'model-00002.safetensors'}})})
mk('idx_traversal', extra={'model.safetensors.index.json': json.dumps({'weight_map': {'model.norm.weight': '../x.safetensors'}})})
mk('idx_notjson', extra={'model.safetensors.index.json': '{'})
mk('idx_wrong_tensor', extra={'model.safetensors.index.json': json.dumps({'weight_map': {'nope': 'model.safetensors'}})})
mk('idx_empty', extra={'model.safetensors.index.json': json.dumps({'weight_map': {}})})
mk('no_safetensors', no_st=True)
json.dump(cases, open(WORK + '/cases_st.json', 'w'))
print(len(cases))
