"""Minimal GGUF reader/writer that records byte offsets of every field."""
import struct

T_U8, T_I8, T_U16, T_I16, T_U32, T_I32, T_F32, T_BOOL, T_STR, T_ARR, T_U64, T_I64, T_F64 = range(13)
FMT = {T_U8: '<B', T_I8: '<b', T_U16: '<H', T_I16: '<h', T_U32: '<I', T_I32: '<i', T_F32: '<f',
       T_BOOL: '<B', T_U64: '<Q', T_I64: '<q', T_F64: '<d'}


class R:
    def __init__(self, b):
        self.b = b
        self.p = 0

    def take(self, n):
        v = self.b[self.p:self.p + n]
        self.p += n
        return v

    def u(self, f):
        s = struct.calcsize(f)
        v = struct.unpack(f, self.take(s))[0]
        return v

    def s(self):
        n = self.u('<Q')
        return self.take(n).decode('utf-8')


def read_val(r, t):
    if t in FMT:
        return r.u(FMT[t])
    if t == T_STR:
        return r.s()
    if t == T_ARR:
        et = r.u('<I')
        n = r.u('<Q')
        return (et, [read_val(r, et) for _ in range(n)])
    raise ValueError(t)


def parse(b):
    """Returns dict with header, kv list [(key, type, value, key_off, type_off, val_off, end)],
    tensors [(name, dims, type, offset, info_off, dims_off, type_off, offset_off)], data_start."""
    r = R(b)
    assert r.take(4) == b'GGUF'
    ver = r.u('<I')
    nt = r.u('<Q')
    nkv = r.u('<Q')
    kvs = []
    for _ in range(nkv):
        ko = r.p
        k = r.s()
        to = r.p
        t = r.u('<I')
        vo = r.p
        v = read_val(r, t)
        kvs.append(dict(key=k, type=t, value=v, key_off=ko, type_off=to, val_off=vo, end=r.p))
    tinfo_start = r.p
    tens = []
    for _ in range(nt):
        io = r.p
        name = r.s()
        no = r.p
        nd = r.u('<I')
        do = r.p
        dims = [r.u('<Q') for _ in range(nd)]
        tyo = r.p
        ty = r.u('<I')
        oo = r.p
        off = r.u('<Q')
        tens.append(dict(name=name, dims=dims, type=ty, offset=off, info_off=io, ndims_off=no,
                         dims_off=do, type_off=tyo, offset_off=oo, end=r.p))
    align = 32
    for kv in kvs:
        if kv['key'] == 'general.alignment':
            align = kv['value']
    ds = (r.p + align - 1) // align * align
    return dict(version=ver, n_tensors=nt, n_kv=nkv, kvs=kvs, tinfo_start=tinfo_start,
                tinfo_end=r.p, tensors=tens, data_start=ds, alignment=align)


def enc_str(s):
    b = s.encode() if isinstance(s, str) else s
    return struct.pack('<Q', len(b)) + b


def enc_val(t, v):
    if t in FMT:
        return struct.pack(FMT[t], v)
    if t == T_STR:
        return enc_str(v)
    if t == T_ARR:
        et, items = v
        return struct.pack('<IQ', et, len(items)) + b''.join(enc_val(et, x) for x in items)
    raise ValueError(t)


def build(version, kvs, tensors, data, alignment=32, tensor_count=None, kv_count=None):
    """kvs: list of (key, type, value); tensors: list of (name, dims, type, offset);
    data: bytes of the data section."""
    out = bytearray(b'GGUF')
    out += struct.pack('<I', version)
    out += struct.pack('<Q', len(tensors) if tensor_count is None else tensor_count)
    out += struct.pack('<Q', len(kvs) if kv_count is None else kv_count)
    for k, t, v in kvs:
        out += enc_str(k) + struct.pack('<I', t) + enc_val(t, v)
    for name, dims, ty, off in tensors:
        out += enc_str(name) + struct.pack('<I', len(dims))
        for d in dims:
            out += struct.pack('<Q', d)
        out += struct.pack('<IQ', ty, off)
    pad = (-len(out)) % alignment
    out += b'\0' * pad
    out += data
    return bytes(out)
