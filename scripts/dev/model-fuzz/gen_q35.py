import os, sys, json
WORK = os.environ.get('FUZZ_WORK', '/tmp/inferd-model-fuzz')
os.environ['MODE'] = 'none'
sys.argv = ['x', WORK + '/q35.gguf', 'q']
import gen_gguf as g
U64 = 10
def multi(sets, base=None):
    kv = g.KVS if base is None else base
    for key, t, v in sets:
        kv = [(kk, tt, vv) for kk, tt, vv in kv if kk != key]
        if v is not None:
            kv = kv + [(key, t, v)]
    return kv
K = g.k
for key, vals in [('ssm.time_step_rank', [0, 3, 8, 1 << 40]), ('ssm.group_count', [0, 3, 1 << 40, 4]),
                  ('ssm.state_size', [0, 1 << 40, (1 << 63) + 16]), ('ssm.conv_kernel', [0, 1, 1 << 40]),
                  ('ssm.inner_size', [0, 1 << 40, 60]), ('nextn_predict_layers', [4, 3, 5, 1 << 40]),
                  ('full_attention_interval', [0, 5])]:
    for v in vals:
        g.emit(f'{key}_{v}', g.rebuild(kvs=multi([(K(key), U64, v)])))
for nm, arr in [('len3', [1, 1, 1]), ('len5', [1, 1, 1, 0, 0]), ('all1', [1, 1, 1, 1]), ('all0', [0, 0, 0, 0])]:
    g.emit(f'rec_{nm}', g.rebuild(kvs=multi([(K('attention.recurrent_layers'), 9, (7, arr))])))
g.emit('rec_u8', g.rebuild(kvs=multi([(K('attention.recurrent_layers'), 9, (0, [1, 1, 1, 0]))])))
g.emit('rec_absent_int5', g.rebuild(kvs=multi([(K('attention.recurrent_layers'), 9, None), (K('full_attention_interval'), U64, 5)])))
# all-linear with layer 3's tensors copied from layer 0
ts = [t for t in g.TS if not t[0].startswith('blk.3.')] + [(t[0].replace('blk.0.', 'blk.3.'), t[1], t[2], t[3]) for t in g.TS if t[0].startswith('blk.0.')]
g.emit('all_linear', g.rebuild(kvs=multi([(K('attention.recurrent_layers'), 9, (7, [1, 1, 1, 1]))]), ts=ts))
ts = [t for t in g.TS if not t[0].startswith(('blk.0.', 'blk.1.', 'blk.2.'))] + [(t[0].replace('blk.3.', f'blk.{i}.'), t[1], t[2], t[3]) for i in range(3) for t in g.TS if t[0].startswith('blk.3.')]
g.emit('all_full', g.rebuild(kvs=multi([(K('attention.recurrent_layers'), 9, (7, [0, 0, 0, 0]))]), ts=ts))
g.emit('wrap_state', g.rebuild(kvs=multi([(K('ssm.state_size'), U64, (1 << 63) + 16)])))
g.emit('headdim_wrap', g.rebuild(kvs=multi([(K('attention.key_length'), U64, (1 << 62) + 16)])))
g.emit('block_count_huge', g.rebuild(kvs=multi([(K('block_count'), U64, 1 << 40), (K('attention.recurrent_layers'), 9, None)])))
json.dump(g.cases, open(WORK + '/cases_q35.json', 'w'))
print(len(g.cases))
