import os, sys, json
WORK = os.environ.get('FUZZ_WORK', '/tmp/inferd-model-fuzz')
os.environ['MODE'] = 'none'
sys.argv = ['x', WORK + '/orig.gguf', 'x']
import gen_gguf as g
U64 = 10
def multi(sets):
    kv = g.KVS
    for key, t, v in sets:
        kv = [(kk, tt, vv) for kk, tt, vv in kv if kk != key] + [(key, t, v)]
    return kv
g.emit('wrap_headdim', g.rebuild(kvs=multi([(g.k('attention.head_count'), U64, 12), (g.k('attention.head_count_kv'), U64, 4), (g.k('attention.key_length'), U64, (1 << 62) + 48)])))
g.emit('wrap_headdim_nokeylen_rope', g.rebuild(kvs=multi([(g.k('attention.head_count'), U64, 12), (g.k('attention.head_count_kv'), U64, 4), (g.k('attention.key_length'), U64, (1 << 62) + 48), (g.k('rope.dimension_count'), U64, 48)])))
g.emit('zero_dim_big_layers', g.rebuild(kvs=multi([(g.k('block_count'), U64, 1 << 24), (g.k('attention.head_count'), U64, 0)])))
g.emit('magic_bad', g.patch(0, '<I', 0x46554748))
g.emit('ctx_2', g.rebuild(kvs=multi([(g.k('context_length'), U64, 2)])))
g.emit('ctx_17', g.rebuild(kvs=multi([(g.k('context_length'), U64, 17)])))
json.dump(g.cases, open(WORK + '/cases_extra.json', 'w'))
print(len(g.cases))
