"""Frame schema: exact round trips, zero copy, and a malformed-frame corpus that must all be FrameError."""
import math
import tracemalloc

import msgpack
import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

import daq.frames as frames_module
from daq.frames import DTYPES, MAX_BUFFER_BYTES, MAX_HEADER_BYTES, Frame, FrameError, decode, encode

ALL_DTYPES = sorted(DTYPES)


def make_frame(data=None, **kw):
    data = np.arange(15, dtype=np.float64).reshape(5, 3) if data is None else data
    args = dict(stream="forceplate/FP1", kind="force", seq=7, t_device=123_456_789, t_host=10**18,
                t=10**18 + 5, rate_hz=1000.0, channels=tuple(f"c{i}" for i in range(data.shape[1])),
                units=("N",) * data.shape[1], data=data)
    args.update(kw)
    return Frame(**args)


def valid_parts():
    return [bytes(p) for p in encode(make_frame())]


def header_of(parts):
    return msgpack.unpackb(parts[1])


def with_header(parts, **changes):
    h = header_of(parts)
    for k, v in changes.items():
        if v is KeyError:
            del h[k]
        else:
            h[k] = v
    return [parts[0], msgpack.packb(h), *parts[2:]]


def random_array(dtype, shape, rng):
    raw = rng.integers(0, 256, size=int(np.prod(shape)) * np.dtype(dtype).itemsize, dtype=np.uint8)
    if np.dtype(dtype).kind == "b":
        raw = raw % 2
    return raw.view(dtype).reshape(shape)


# ------------------------------------------------------------------------------ round trips


@pytest.mark.parametrize("dtype", ALL_DTYPES)
@pytest.mark.parametrize("shape", [(0, 3), (1, 1), (5, 6), (10, 0), (7, 31)])
def test_round_trip_every_dtype_and_shape_is_bit_exact(dtype, shape):
    rng = np.random.default_rng(abs(hash((dtype, shape))) % 2**32)
    data = random_array(dtype, shape, rng)  # random bit patterns, NaNs and infinities included
    frame = make_frame(data)
    back = decode([bytes(p) for p in encode(frame)])
    assert back.data.dtype == np.dtype(dtype)
    assert back.data.shape == shape
    assert back.data.tobytes() == data.tobytes()
    for name in ("stream", "kind", "seq", "t_device", "t_host", "t", "rate_hz", "channels", "units"):
        assert getattr(back, name) == getattr(frame, name), name


def test_extra_buffers_and_meta_round_trip():
    counter = np.arange(2**24 - 3, 2**24 + 2, dtype=np.uint32)  # a 24-bit device counter crossing its wrap
    cov = np.eye(3, dtype=np.float32)[None].repeat(5, axis=0)  # (samples, 3, 3)
    meta = {"device": "AMTI", "serial": 1234, "delay_s": 0.002, "flags": [True, None], "nested": {"a": b"\x00\x01"}}
    frame = make_frame(extra={"counter": counter, "cov": cov}, meta=meta)
    back = decode(encode(frame))
    assert list(back.extra) == ["counter", "cov"]
    np.testing.assert_array_equal(back.extra["counter"], counter)
    np.testing.assert_array_equal(back.extra["cov"], cov)
    assert back.extra["cov"].dtype == np.float32
    assert back.meta == meta


def test_big_endian_and_non_contiguous_inputs_are_converted_exactly():
    base = np.arange(40, dtype=">f8").reshape(10, 4)
    frame = make_frame(base[::2, 1:])  # big-endian and strided
    back = decode(encode(frame))
    assert back.data.dtype.str == "<f8"
    np.testing.assert_array_equal(back.data, base[::2, 1:].astype("<f8"))


def test_encode_is_zero_copy_and_decode_views_the_message():
    data = np.random.default_rng(1).normal(size=(500, 6))
    parts = encode(make_frame(data))
    assert np.shares_memory(np.frombuffer(parts[2], dtype=np.float64), data)
    payload = bytearray(parts[2])
    back = decode([parts[0], parts[1], payload])
    assert np.shares_memory(back.data, np.frombuffer(payload, dtype=np.uint8))
    assert not back.data.flags.writeable or isinstance(payload, bytearray)


def test_header_is_plain_msgpack_with_the_documented_fields():
    data = np.zeros((5, 2), dtype=np.int16)
    topic, header, buf = encode(make_frame(data, channels=("a", "b"), units=("N", "m")))
    assert bytes(topic) == b"forceplate/FP1"
    h = msgpack.unpackb(header)  # an independent reader sees the schema of architecture.md
    assert h["stream"] == "forceplate/FP1" and h["seq"] == 7 and h["t_device"] == 123_456_789
    assert h["channels"] == ["a", "b"] and h["units"] == ["N", "m"]
    assert h["buffers"] == [{"name": "data", "dtype": "<i2", "shape": [5, 2]}]
    assert len(buf) == 5 * 2 * 2


def test_sample_times_follow_the_sample_count():
    frame = make_frame(np.zeros((5, 1)), rate_hz=1000.0, t=1_000_000_000)
    np.testing.assert_array_equal(frame.sample_times(), 1_000_000_000 + np.arange(5) * 1_000_000)
    frame = make_frame(np.zeros((3, 1)), rate_hz=300.0, t=0)
    np.testing.assert_array_equal(frame.sample_times(), [0, 3_333_333, 6_666_667])
    with pytest.raises(FrameError, match="irregular"):
        make_frame(np.zeros((2, 1)), rate_hz=0.0).sample_times()
    with pytest.raises(FrameError, match="t_device"):
        make_frame(t_device=None).sample_times("t_device")


# ------------------------------------------------------------------------------ encode refuses


@pytest.mark.parametrize("data, match", [
    (np.zeros(5), "2-D"),
    (np.zeros((2, 2, 2)), "2-D"),
    (np.array([["a", "b"]]), "dtype"),
    (np.array([[object()]]), "dtype"),
    (np.zeros((1, 1), dtype="datetime64[ns]"), "dtype"),
])
def test_encode_rejects_unframeable_data(data, match):
    frame = make_frame(np.zeros((1, 1)))
    frame.data = data
    frame.channels = ("c",) * (data.shape[-1] if data.ndim else 1)
    frame.units = frame.channels
    with pytest.raises(FrameError, match=match):
        encode(frame)


def test_encode_rejects_channel_mismatch_bad_meta_and_bad_names():
    with pytest.raises(FrameError, match="buffer 0 must be 'data'"):
        encode(make_frame(channels=("a", "b"), units=("N", "N")))
    with pytest.raises(FrameError, match="units"):
        encode(make_frame(units=("N",)))
    with pytest.raises(FrameError, match="unsupported type"):
        encode(make_frame(meta={"x": object()}))
    with pytest.raises(FrameError, match="stream"):
        encode(make_frame(stream=""))
    with pytest.raises(FrameError, match="without NUL"):
        encode(make_frame(stream="\x00walklab/sub/x"))
    with pytest.raises(FrameError, match="seq"):
        encode(make_frame(seq=-1))


# ------------------------------------------------------------------------------ malformed corpus


def test_valid_corpus_base_decodes():
    assert decode(valid_parts()).seq == 7


@pytest.mark.parametrize("field", ["v", "stream", "kind", "seq", "t_device", "t_host", "t", "t_pub",
                                   "rate_hz", "channels", "units", "buffers", "meta"])
def test_missing_field_is_named(field):
    with pytest.raises(FrameError, match=f"missing field.*{field}"):
        decode(with_header(valid_parts(), **{field: KeyError}))


@pytest.mark.parametrize("changes, match", [
    ({"seq": "7"}, "seq"), ({"seq": True}, "seq"), ({"seq": -1}, "seq"), ({"seq": 1.0}, "seq"),
    ({"t_host": 2**63}, "t_host"), ({"t": None}, "t must"), ({"t_device": "now"}, "t_device"),
    ({"rate_hz": float("nan")}, "rate_hz"), ({"rate_hz": -1.0}, "rate_hz"), ({"rate_hz": "1k"}, "rate_hz"),
    ({"channels": "c0"}, "channels"), ({"channels": [1, 2, 3]}, "channels"), ({"units": ["N"]}, "units"),
    ({"stream": "other/stream"}, "differs from header stream"), ({"stream": 5}, "stream"),
    ({"kind": ""}, "kind"), ({"v": 2}, "schema version"), ({"extra_field": 1}, "unknown field"),
    ({"meta": [1, 2]}, "meta"), ({"buffers": []}, "buffers"), ({"buffers": "data"}, "buffers"),
])
def test_wrong_types_and_values_are_rejected(changes, match):
    with pytest.raises(FrameError, match=match):
        decode(with_header(valid_parts(), **changes))


@pytest.mark.parametrize("dtype", ["|O", "<U4", ">f8", "|V8", "<M8[ns]", "object", "f8", "<f128", 5, None])
def test_unknown_dtypes_are_rejected_before_numpy_sees_them(dtype):
    parts = valid_parts()
    with pytest.raises(FrameError, match="dtype"):
        decode(with_header(parts, buffers=[{"name": "data", "dtype": dtype, "shape": [5, 3]}]))


@pytest.mark.parametrize("shape", [[5, 2], [3, 5], [15], [5, 3, 1], [-5, -3], [5, "3"], "5x3", [5.0, 3]])
def test_shape_that_does_not_match_the_bytes_or_channels_is_rejected(shape):
    with pytest.raises(FrameError):
        decode(with_header(valid_parts(), buffers=[{"name": "data", "dtype": "<f8", "shape": shape}]))


def test_truncated_and_overlong_buffers_are_rejected():
    parts = valid_parts()
    for cut in (0, 1, 8, len(parts[2]) - 1):
        with pytest.raises(FrameError, match="has .* bytes"):
            decode([parts[0], parts[1], parts[2][:cut]])
    with pytest.raises(FrameError, match="has .* bytes"):
        decode([parts[0], parts[1], parts[2] + b"\x00"])


def test_ten_gigabyte_declared_size_is_rejected_without_allocating():
    parts = valid_parts()
    huge = [{"name": "data", "dtype": "<f8", "shape": [1_250_000_000 // 3 * 3, 3]}]  # 10 GB of f8
    tracemalloc.start()
    try:
        with pytest.raises(FrameError, match="MAX_BUFFER_BYTES"):
            decode(with_header(parts, channels=["a", "b", "c"], buffers=huge))
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 10 * 2**20
    # declared just under the limit but the bytes are not there: the byte count check catches it
    n = MAX_BUFFER_BYTES // 8 // 3
    with pytest.raises(FrameError, match="has .* bytes"):
        decode(with_header(parts, buffers=[{"name": "data", "dtype": "<f8", "shape": [n, 3]}]))


def test_nested_container_bomb_is_rejected_with_bounded_memory():
    """1000 nested arrays each declaring 4 billion entries, in 5 kB: refused, little memory touched."""
    parts = valid_parts()
    bomb = b"\xdd\xff\xff\xff\xff" * 1000
    nested = b"\xdd\x00\x00\xff\xff" * 1000  # 65535 entries each: within the limit, still incomplete
    tracemalloc.start()
    try:
        for header in (bomb, nested):
            with pytest.raises(FrameError, match="not valid msgpack"):
                decode([parts[0], header, parts[2]])
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 200 * 2**20


def test_part_count_topic_and_msgpack_level_errors():
    parts = valid_parts()
    with pytest.raises(FrameError, match="parts"):
        decode(parts[:1])
    with pytest.raises(FrameError, match="declares 1 buffers, message has 0"):
        decode(parts[:2])
    with pytest.raises(FrameError, match="declares 1 buffers, message has 2"):
        decode(parts + [b""])
    with pytest.raises(FrameError, match="not UTF-8"):
        decode([b"\xff\xfeforce", *parts[1:]])
    with pytest.raises(FrameError, match="differs"):
        decode([b"forceplate/FP2", *parts[1:]])
    with pytest.raises(FrameError, match="not valid msgpack"):
        decode([parts[0], parts[1][:-3], parts[2]])
    with pytest.raises(FrameError, match="not valid msgpack"):
        decode([parts[0], parts[1] + b"\x00", parts[2]])  # trailing bytes
    with pytest.raises(FrameError, match="not valid msgpack"):  # integer map keys (strict_map_key)
        decode([parts[0], msgpack.packb({1: 2}), parts[2]])
    for ext in (msgpack.ExtType(5, b"x"), msgpack.Timestamp(1, 2)):
        with pytest.raises(FrameError, match="max_ext_len"):
            decode([parts[0], msgpack.packb({"v": 1, "meta": ext}), parts[2]])
    with pytest.raises(FrameError, match="expected a msgpack map"):
        decode([parts[0], msgpack.packb([1, 2, 3]), parts[2]])
    with pytest.raises(FrameError, match="not valid msgpack"):  # declared 4 billion entries, 5 bytes present
        decode([parts[0], b"\xdd\xff\xff\xff\xff", parts[2]])
    with pytest.raises(FrameError, match="header is .* bytes"):
        decode([parts[0], b"\x90" * (MAX_HEADER_BYTES + 1), parts[2]])


@settings(max_examples=300, deadline=None)
@given(st.lists(st.binary(max_size=64), min_size=0, max_size=6))
def test_random_bytes_never_crash(parts):
    with pytest.raises(FrameError):
        decode(parts)


json_like = st.recursive(
    st.none() | st.booleans() | st.integers(-2**70, 2**70) | st.floats() | st.text(max_size=8) | st.binary(max_size=8),
    lambda children: st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=6), children, max_size=4),
    max_leaves=12,
)


@settings(max_examples=150, deadline=None)
@given(st.dictionaries(st.sampled_from(["v", "stream", "kind", "seq", "t_device", "t_host", "t", "t_pub", "rate_hz",
                                        "channels", "units", "buffers", "meta", "junk"]), json_like, min_size=1))
def test_random_header_values_are_rejected_or_decode_consistently(changes):
    parts = valid_parts()
    h = header_of(parts)
    h.update(changes)
    try:
        raw_header = msgpack.packb(h)
    except (OverflowError, ValueError):
        return  # not representable in msgpack at all
    try:
        frame = decode([parts[0], raw_header, parts[2]])
    except FrameError:
        return
    # Whatever got through is a consistent frame: the bytes match the declared shape exactly.
    assert frame.data.nbytes == len(parts[2]) and frame.data.shape[1] == len(frame.channels)
    assert isinstance(frame.seq, int) and frame.seq >= 0 and math.isfinite(frame.rate_hz)


@settings(max_examples=200, deadline=None)
@given(st.data())
def test_bit_flips_in_a_valid_message_are_rejected_or_consistent(data):
    parts = valid_parts()
    which = data.draw(st.integers(0, 2))
    raw = bytearray(parts[which])
    if not raw:
        return
    pos = data.draw(st.integers(0, len(raw) - 1))
    raw[pos] ^= 1 << data.draw(st.integers(0, 7))
    parts[which] = bytes(raw)
    decode(valid_parts())  # the stream's static header is known: a flip after it takes the short path
    warm = _outcome(lambda p: _frame_fields(decode(p)), parts)
    assert warm == _outcome(_cold_decode, parts)  # which refuses and accepts exactly what the full check does
    if warm[0] == "ok":
        frame = decode(parts)
        assert frame.data.nbytes == len(parts[2]) and frame.data.shape[1] == len(frame.channels)


# ------------------------------------------------------------------------------ validation caches


def _outcome(fn, *args):
    """What fn(*args) gives: ('ok', value) or ('error', message)."""
    try:
        return "ok", fn(*args)
    except FrameError as exc:
        return "error", str(exc)


def _frame_fields(frame):
    return (frame.stream, frame.kind, frame.seq, frame.t_device, frame.t_host, frame.t, frame.t_pub, frame.rate_hz,
            frame.channels, frame.units, frame.data.dtype.str, frame.data.shape, frame.data.tobytes(),
            {k: (v.dtype.str, v.shape, v.tobytes()) for k, v in frame.extra.items()}, msgpack.packb(frame.meta))  # NaN-safe


def _cold_decode(parts):
    frames_module._LAYOUTS.clear()  # the full check, as for a stream's first frame
    frames_module._STATIC_HEADERS.clear()
    return _frame_fields(decode(parts))


@settings(max_examples=150, deadline=None)
@given(st.dictionaries(st.sampled_from(["seq", "t_device", "rate_hz", "channels", "units", "buffers", "kind", "meta"]),
                       json_like | st.just([{"name": "data", "dtype": "<f8", "shape": [5.0, 3]}])
                       | st.just([{"name": "data", "dtype": "<f8", "shape": [5, True]}]), min_size=1))
def test_decode_with_a_warm_layout_cache_agrees_with_the_full_check(changes):
    """A stream's layout is checked in full once, then compared; the comparison must refuse exactly
    what the full check refuses (5.0 == 5 and True == 1 in Python, but not on the wire)."""
    parts = valid_parts()
    h = header_of(parts)
    h.update(changes)
    try:
        bad = [parts[0], msgpack.packb(h), parts[2]]
    except (OverflowError, ValueError):
        return
    cold = _outcome(_cold_decode, bad)
    decode(parts)  # warms the cache with the valid layout of the same stream
    warm = _outcome(lambda p: _frame_fields(decode(p)), bad)
    assert warm == cold


@pytest.mark.parametrize("changes", [
    {}, {"seq": 8}, {"seq": -1}, {"t": 1.5}, {"rate_hz": 500}, {"rate_hz": np.float32(1000.0)}, {"rate_hz": True},
    {"channels": ["c0", "c1", "c2"]}, {"channels": ("c0", "c1", 2)}, {"units": ("N", "N")}, {"kind": "moment"},
    {"meta": {"zero": "ok"}}, {"meta": {"x": {1, 2}}}, {"seq": np.uint32(3)}, {"t_device": np.int64(-5)},
    {"extra": {"counter": np.arange(5, dtype=np.uint32)}}, {"data": np.zeros((6, 3), dtype=np.float32)},
])
def test_encode_with_a_warm_header_cache_gives_the_bytes_of_a_cold_encode(changes):
    frame = make_frame(**changes)
    frames_module._PREFIXES.clear()
    cold = _outcome(lambda f: [bytes(p) for p in encode(f)], frame)
    encode(make_frame())  # the stream's usual layout is cached
    _outcome(encode, frame)  # and this one's, if valid
    warm = _outcome(lambda f: [bytes(p) for p in encode(f)], frame)
    assert warm == cold
    if cold[0] == "ok":  # and an independent msgpack reader sees the frame's own values
        h = msgpack.unpackb(cold[1][1])
        assert (h["seq"], h["t_device"], h["rate_hz"], h["channels"]) == (
            int(frame.seq), frame.t_device, float(frame.rate_hz), list(frame.channels))


def test_a_streams_static_header_is_learnt_from_encodes_bytes_only():
    """The short path applies to headers packed as `encode` packs them; another key order (a valid
    header from another encoder) is decoded in full every time, with the same result."""
    frames_module._STATIC_HEADERS.clear()
    parts = valid_parts()
    first = _frame_fields(decode(parts))
    assert make_frame().stream in frames_module._STATIC_HEADERS
    assert _frame_fields(decode(parts)) == first
    frames_module._STATIC_HEADERS.clear()
    h = header_of(parts)
    reordered = [parts[0], msgpack.packb(dict(reversed(list(h.items())))), *parts[2:]]
    assert _frame_fields(decode(reordered)) == first and not frames_module._STATIC_HEADERS
