import json, os, struct, math, sys
import ggufio as G

WORK = os.environ.get('FUZZ_WORK', '/tmp/inferd-model-fuzz')
OUT = WORK + '/gguf'
os.makedirs(OUT, exist_ok=True)
SRC = sys.argv[1] if len(sys.argv) > 1 else WORK + '/orig.gguf'
PFX = sys.argv[2] if len(sys.argv) > 2 else 'g'
b = open(SRC, 'rb').read()
P = G.parse(b)
DATA = b[P['data_start']:]
KVS = [(kv['key'], kv['type'], kv['value']) for kv in P['kvs']]
TS = [(t['name'], list(t['dims']), t['type'], t['offset']) for t in P['tensors']]
ARCH = dict((k, v) for k, _, v in KVS)['general.architecture']
cases = []

only = set(os.environ.get('ONLY', '').split(',')) - {''}


def emit(name, data):
    name = f'{PFX}_{name}'
    if only and name not in only:
        return
    p = f'{OUT}/{name}.gguf'
    with open(p, 'wb') as f:
        f.write(data)
    cases.append([name, p])


def rebuild(kvs=None, ts=None, data=None, align=None, **kw):
    kvs = KVS if kvs is None else kvs
    a = align
    if a is None:
        a = dict((k, v) for k, _, v in kvs).get('general.alignment', 32)
        if not isinstance(a, int) or a <= 0 or a & (a - 1):
            a = 32
    return G.build(P['version'], kvs, TS if ts is None else ts, DATA if data is None else data,
                   alignment=a, **kw)


assert rebuild() == b, 'rebuild mismatch'


def patch(off, fmt, val):
    bb = bytearray(b)
    struct.pack_into(fmt, bb, off, val)
    return bytes(bb)


def kv_off(key):
    return next(kv for kv in P['kvs'] if kv['key'] == key)


def set_kv(key, t, v):
    out, found = [], False
    for k, tt, vv in KVS:
        if k == key:
            out.append((k, t, v)); found = True
        else:
            out.append((k, tt, vv))
    if not found:
        out.append((key, t, v))
    return out


def del_kv(key):
    return [x for x in KVS if x[0] != key]


def set_t(tname, **kw):
    out = []
    for n, d, ty, off in TS:
        if n == tname:
            n = kw.get('name', n); d = kw.get('dims', d); ty = kw.get('type', ty); off = kw.get('offset', off)
        out.append((n, d, ty, off))
    return out


def k(s):
    return f'{ARCH}.{s}'


if __name__ == '__main__':
    mode = os.environ.get('MODE', 'smol')
    L = len(b)
    ds = P['data_start']
    if mode == 'smol':
        # --- truncations
        tok = kv_off('tokenizer.ggml.tokens')
        tt = kv_off('tokenizer.ggml.token_type')
        mg = kv_off('tokenizer.ggml.merges')
        ti = P['tensors']
        for off in [0, 3, 4, 7, 8, 15, 23, 30, 60, tok['val_off'] + 6, tok['val_off'] + 100, tt['val_off'] + 50,
                    mg['val_off'] + 1000, P['tinfo_start'], P['tinfo_start'] + 5, ti[1]['dims_off'] + 3,
                    ti[100]['type_off'] + 2, P['tinfo_end'] - 4, P['tinfo_end'], ds, ds + 1000,
                    ds + ti[1]['offset'] + 100, ds + ti[150]['offset'] + 7, L - 1]:
            emit(f'trunc_{off}', b[:off])
        # --- header
        for v in [1, 4, 0xFFFFFFFF]:
            emit(f'version_{v}', patch(4, '<I', v))
        emit('version_2', patch(4, '<I', 2))
        for v in [0, 1 << 40, 271, 273, (1 << 64) - 1]:
            emit(f'tcount_{v}', patch(8, '<Q', v))
        for v in [0, 1 << 40, 32, 34, (1 << 64) - 1]:
            emit(f'kvcount_{v}', patch(16, '<Q', v))
        emit('magic', patch(0, '<I', 0x46554747))
        # --- string lengths
        a = kv_off('general.architecture')
        for v in [1 << 40, (1 << 63), (1 << 64) - 1, 100]:
            emit(f'keylen_{v}', patch(a['key_off'], '<Q', v))
            emit(f'strlen_{v}', patch(a['val_off'], '<Q', v))
            emit(f'tnamelen_{v}', patch(ti[0]['info_off'], '<Q', v))
        emit('str_badutf8', patch(a['val_off'] + 8, '<B', 0xff))
        # --- array lengths
        for v in [1 << 40, (1 << 61), (1 << 64) - 1, 49153, 49151, 0]:
            emit(f'tokens_arrlen_{v}', patch(tok['val_off'] + 4, '<Q', v))
        emit('tokens_arr_elem_type_99', patch(tok['val_off'], '<I', 99))
        emit('tokens_arr_elem_type_arr', patch(tok['val_off'], '<I', 9))
        emit('tokentype_arrlen_huge', patch(tt['val_off'] + 4, '<Q', 1 << 40))
        # --- value types
        for v in [13, 99, 0xFFFFFFFF, 9]:
            emit(f'valtype_{v}', patch(a['type_off'], '<I', v))
        emit('bool_2', patch(kv_off('tokenizer.ggml.add_bos_token')['val_off'], '<B', 2))
        # nested arrays deep / arrays of empty arrays
        v = (0, [1])
        for _ in range(10):
            v = (9, [v])
        emit('nested_arr_deep', rebuild(kvs=KVS + [('x.nest', 9, v)]))
        # --- tensor infos
        t0 = ti[1]  # blk.0.attn_norm.weight [576] F32
        emit('ndims_5', patch(t0['ndims_off'], '<I', 5))
        emit('ndims_huge', patch(t0['ndims_off'], '<I', 0xFFFFFFFF))
        for v in [0, 1 << 40, (1 << 63), (1 << 64) - 1, 577, 575]:
            emit(f'dim_{v}', patch(t0['dims_off'], '<Q', v))
        emit('dim_embd0', patch(ti[0]['dims_off'], '<Q', 0))
        emit('dim_embd_huge', patch(ti[0]['dims_off'] + 8, '<Q', 1 << 40))
        for v in [99, 10, 6, 24, 0xFFFFFFFF, 1, 30]:
            emit(f'ttype_{v}', patch(t0['type_off'], '<I', v))
        emit('ttype_q41_to_f32', patch(ti[2]['type_off'], '<I', 0))
        emit('ttype_q41_to_q40', patch(ti[2]['type_off'], '<I', 2))
        emit('ttype_norm_to_q41', rebuild(ts=set_t('output_norm.weight', type=3)))
        for v in [1, 16, 1 << 62, (1 << 64) - 32, L]:
            emit(f'toff_{v}', patch(t0['offset_off'], '<Q', v))
        emit('toff_overlap', patch(ti[2]['offset_off'], '<Q', ti[3]['offset']))
        emit('toff_last_past_end', patch(ti[-1]['offset_off'], '<Q', ti[-1]['offset'] + 64))
        # --- alignment
        for v in [0, 3, 1 << 21, 1, 64, 8]:
            emit(f'align_{v}', rebuild(kvs=KVS + [('general.alignment', 4, v)]))
        emit('align_str', rebuild(kvs=KVS + [('general.alignment', 8, '32')]))
        # --- duplicates
        emit('dup_tensor', rebuild(ts=set_t('blk.0.ffn_up.weight', name='blk.0.ffn_gate.weight')))
        emit('dup_kv', rebuild(kvs=KVS + [('general.architecture', 8, 'llama')]))
        # --- missing keys
        for key in ['general.architecture', k('block_count'), k('embedding_length'), k('attention.head_count'),
                    k('feed_forward_length'), k('attention.layer_norm_rms_epsilon'), k('vocab_size'),
                    k('attention.head_count_kv'), k('rope.dimension_count'), k('context_length'),
                    'tokenizer.ggml.tokens', 'tokenizer.ggml.model', 'tokenizer.ggml.merges',
                    'tokenizer.ggml.token_type', 'tokenizer.chat_template', 'tokenizer.ggml.eos_token_id',
                    'tokenizer.ggml.bos_token_id', 'tokenizer.ggml.pre']:
            emit(f'nokey_{key}', rebuild(kvs=del_kv(key)))
        # --- missing tensors
        for t in ['token_embd.weight', 'output_norm.weight', 'blk.29.ffn_up.weight', 'blk.0.attn_q.weight']:
            emit(f'notensor_{t}', rebuild(ts=[x for x in TS if x[0] != t]))
        emit('embd_dims_swapped', rebuild(ts=set_t('token_embd.weight', dims=[49152, 576])))
        # --- arch
        for v in ['gpt9', 'qwen2', 'qwen3', 'qwen35', '']:
            kv = [(kk.replace('llama.', v + '.') if kk.startswith('llama.') else kk, t, vv) for kk, t, vv in
                  set_kv('general.architecture', 8, v)]
            emit(f'arch_{v or "empty"}', rebuild(kvs=kv))
        emit('arch_not_string', rebuild(kvs=set_kv('general.architecture', 4, 7)))
        # --- numeric values
        U64 = 10
        for key, vals in [
            ('block_count', [0, 31, 29, 1 << 40, 1 << 32, (1 << 64) - 1, 1 << 28]),
            ('embedding_length', [0, 577, 1 << 40, (1 << 64) - 1]),
            ('attention.head_count', [0, 7, 1 << 40, 18]),
            ('attention.head_count_kv', [0, 2, 9, 1 << 40]),
            ('attention.key_length', [0, 63, 1 << 40, 128]),
            ('rope.dimension_count', [0, 65, 1000, 2]),
            ('vocab_size', [0, 49153, 1 << 40, 49151, (1 << 32)]),
            ('feed_forward_length', [0, 1 << 40]),
            ('context_length', [0, 1, 1 << 40, (1 << 64) - 1]),
        ]:
            for v in vals:
                emit(f'val_{key}_{v}', rebuild(kvs=set_kv(k(key), U64, v)))
        emit('val_block_count_str', rebuild(kvs=set_kv(k('block_count'), 8, '30')))
        emit('val_block_count_neg', rebuild(kvs=set_kv(k('block_count'), 5, -1)))
        emit('val_head_count_f32', rebuild(kvs=set_kv(k('attention.head_count'), 6, 9.0)))
        for nm, v in [('nan', float('nan')), ('neg', -1.0), ('zero', 0.0), ('inf', float('inf')), ('tiny', 1e-30), ('one', 1.0)]:
            emit(f'val_rope_base_{nm}', rebuild(kvs=set_kv(k('rope.freq_base'), 6, v)))
            emit(f'val_rms_eps_{nm}', rebuild(kvs=set_kv(k('attention.layer_norm_rms_epsilon'), 6, v)))
        emit('rope_scaling_linear', rebuild(kvs=set_kv(k('rope.scaling.type'), 8, 'linear')))
        emit('rope_scaling_none', rebuild(kvs=set_kv(k('rope.scaling.type'), 8, 'none')))
        # --- tokenizer
        toks = dict((kk, vv) for kk, _, vv in KVS)['tokenizer.ggml.tokens'][1]
        types = dict((kk, vv) for kk, _, vv in KVS)['tokenizer.ggml.token_type'][1]
        merges = dict((kk, vv) for kk, _, vv in KVS)['tokenizer.ggml.merges'][1]
        emit('tok_empty', rebuild(kvs=set_kv('tokenizer.ggml.tokens', 9, (8, []))))
        emit('tok_short', rebuild(kvs=set_kv('tokenizer.ggml.tokens', 9, (8, toks[:-1]))))
        emit('tok_short_both', rebuild(kvs=set_kv('tokenizer.ggml.token_type', 9, (5, types[:-1])) and
                                       [(kk, t, (8, toks[:-100]) if kk == 'tokenizer.ggml.tokens' else (5, types[:-100]) if kk == 'tokenizer.ggml.token_type' else vv) for kk, t, vv in KVS]))
        emit('tok_long_both', rebuild(kvs=[(kk, t, (8, toks + ['<extra_%d>' % i for i in range(100)]) if kk == 'tokenizer.ggml.tokens' else (5, types + [3] * 100) if kk == 'tokenizer.ggml.token_type' else vv) for kk, t, vv in KVS]))
        emit('tok_tiny_vocab', rebuild(kvs=[(kk, t, (8, toks[:10]) if kk == 'tokenizer.ggml.tokens' else (5, types[:10]) if kk == 'tokenizer.ggml.token_type' else (8, []) if kk == 'tokenizer.ggml.merges' else vv) for kk, t, vv in KVS]))
        emit('tok_types_short', rebuild(kvs=set_kv('tokenizer.ggml.token_type', 9, (5, types[:-1]))))
        emit('tok_types_99', rebuild(kvs=set_kv('tokenizer.ggml.token_type', 9, (5, [99] * len(types)))))
        emit('tok_types_all_control', rebuild(kvs=set_kv('tokenizer.ggml.token_type', 9, (5, [3] * len(types)))))
        emit('tok_not_strings', rebuild(kvs=set_kv('tokenizer.ggml.tokens', 9, (4, list(range(len(toks)))))))
        emit('tok_all_same', rebuild(kvs=set_kv('tokenizer.ggml.tokens', 9, (8, ['a'] * len(toks)))))
        emit('tok_all_empty', rebuild(kvs=set_kv('tokenizer.ggml.tokens', 9, (8, [''] * len(toks)))))
        emit('merges_bad', rebuild(kvs=set_kv('tokenizer.ggml.merges', 9, (8, ['abc'] + merges[1:]))))
        emit('merges_unknown_tok', rebuild(kvs=set_kv('tokenizer.ggml.merges', 9, (8, ['zzzq qqqz'] + merges[1:]))))
        emit('merges_empty', rebuild(kvs=set_kv('tokenizer.ggml.merges', 9, (8, []))))
        emit('merges_not_arr', rebuild(kvs=set_kv('tokenizer.ggml.merges', 8, 'a b')))
        for kk in ['bos', 'eos', 'unknown', 'padding']:
            emit(f'tokid_{kk}_oob', rebuild(kvs=set_kv(f'tokenizer.ggml.{kk}_token_id', 4, len(toks))))
            emit(f'tokid_{kk}_neg', rebuild(kvs=set_kv(f'tokenizer.ggml.{kk}_token_id', 5, -1)))
        emit('tokmodel_llama', rebuild(kvs=set_kv('tokenizer.ggml.model', 8, 'llama')))
        emit('tokpre_unknown', rebuild(kvs=set_kv('tokenizer.ggml.pre', 8, 'nonsense')))
        emit('add_bos_true', rebuild(kvs=set_kv('tokenizer.ggml.add_bos_token', 7, 1)))
        emit('tmpl_syntax', rebuild(kvs=set_kv('tokenizer.chat_template', 8, '{% for m in messages %}{{ m.content ')))
        emit('tmpl_raise', rebuild(kvs=set_kv('tokenizer.chat_template', 8, "{{ raise_exception('boom') }}")))
        emit('tmpl_empty', rebuild(kvs=set_kv('tokenizer.chat_template', 8, '')))
        emit('tmpl_loop', rebuild(kvs=set_kv('tokenizer.chat_template', 8, "{% for i in range(100000000) %}{{ i }}{% endfor %}")))
        emit('tmpl_int', rebuild(kvs=set_kv('tokenizer.chat_template', 4, 5)))
    json.dump(cases, open(f'{WORK}/cases_{PFX}_{mode}.json', 'w'))
    print(len(cases))
