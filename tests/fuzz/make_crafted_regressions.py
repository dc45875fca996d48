#!/usr/bin/env python3
"""Writes the hand-made regression inputs of tests/fuzz/regressions/ (the others are crash
inputs saved from fuzzing runs): inputs a mutation-based fuzzer is unlikely to reach in a short
run, such as a small gzip file that inflates to far more than its header promises.

    python3 tests/fuzz/make_crafted_regressions.py [tests/fuzz/regressions]

Deterministic (fixed gzip mtime), so rerunning it rewrites the same bytes. Python's standard
library only.
"""
import gzip
import json
import os
import struct
import sys

root = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(os.path.abspath(__file__)), "regressions")


def write(target, name, data):
    os.makedirs(os.path.join(root, target), exist_ok=True)
    with open(os.path.join(root, target, name), "wb") as f:
        f.write(data)


# idx, mode 1 (the payload is the .gz file as is): a rank-1 IDX header promising one byte, that
# byte, then 72 MiB of zeros, all gzip-compressed (about 70 KiB). A reader that inflates the
# whole stream before checking it against the header allocates more than 64 MiB.
header = b"\x00\x00\x08\x01" + struct.pack(">I", 1)
raw = header + b"\x07" + bytes(72 << 20)
write("idx", "gzip_trailing_inflates_72MiB", b"\x01\x01" + gzip.compress(raw, compresslevel=9, mtime=0))

# idx, mode 0 with selector bit 0x80: a valid rank-1 file of 3 labels, followed by 96 MiB of
# zeros (a sparse file the target makes): must be refused as trailing bytes, from the size alone.
labels = b"\x00\x00\x08\x01" + struct.pack(">I", 3) + b"\x00\x04\x09"
write("idx", "plain_trailing_96MiB_sparse", b"\x80\x01" + labels)

# safetensors, selector 0x80 (plain load): a one-tensor file followed by 96 MiB of zeros (sparse):
# the data region no longer matches the header; a reader that loads the whole file first
# allocates more than 64 MiB.
hdr = json.dumps({"a": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4]}}, separators=(",", ":")).encode()
hdr += b" " * (-len(hdr) % 8)
st = struct.pack("<Q", len(hdr)) + hdr + struct.pack("<f", 1.0)
write("safetensors", "trailing_96MiB_sparse", b"\x80" + st)
# conv_pool: byte-coded requests (fuzz_conv_pool.cpp's run(); in fuzz_input, a byte below 224 is a
# small value and 224 + k the k-th hostile value: 232 = 2^31 - 1, 240 = 2^30 - 1).
# Fields: op, nhwc, format, dtype (float32), N, C - 1, H, W, rank, value count - 1, value (0.0),
# requires_grad, kernel h w, stride - 1 h w, padding h w, dilation - 1 h w, then per op.
def conv_request(op, n, kernel, stride, padding, dilation, tail=b""):
    return bytes([op, 0, 0, 0, n, 0, 3, 3, 0, 0, 100, 0, *kernel, *stride, *padding, *dilation]) + tail


# unfold2d of an empty batch [0, 1, 3, 3] with kernel and padding 2^31 - 1: a valid window, an
# empty result [(2^31 - 1)^2, 0]: nothing may be allocated for the kernel's size.
write("conv_pool", "unfold2d_empty_batch_huge_kernel", conv_request(1, 0, (232, 232), (0, 0), (232, 232), (0, 0), b"\x64"))
# avg_pool2d of an empty batch with kernel 2^31 - 1 and padding 2^30 - 1 (below half the
# kernel): an empty [0, 1, 1, 1] result.
write("conv_pool", "avg_pool2d_empty_batch_huge_kernel", conv_request(5, 0, (232, 232), (0, 0), (240, 240), (0, 0), b"\x00\x00"))
print("crafted regressions written under", root)

# image (selector 1: three channels): headers announcing far more pixels than the target's
# max_pixels (2^18), which libpng and libjpeg accept as headers; a decoder that allocates the
# pixels before checking their count asks for terabytes.
import zlib


def png_chunk(kind, data):
    return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))


ihdr = struct.pack(">IIBBBBB", 1000000, 1000000, 8, 2, 0, 0, 0)  # libpng's default limit per side
png = b"\x89PNG\r\n\x1a\n" + png_chunk(b"IHDR", ihdr) + png_chunk(b"IDAT", zlib.compress(b"\x00")) + png_chunk(b"IEND", b"")
write("image", "png_header_1000000_square", b"\x01" + png)
# A progressive JPEG's frame header (SOF2) of 65500 x 65500, three components, then a DC scan.
sof = b"\xff\xc2" + struct.pack(">HBHHB", 17, 8, 65500, 65500, 3) + b"\x01\x11\x00\x02\x11\x00\x03\x11\x00"
sos = b"\xff\xda" + struct.pack(">HB", 12, 3) + b"\x01\x00\x02\x00\x03\x00" + b"\x00\x00\x00"
write("image", "jpeg_progressive_65500_square", b"\x01" + b"\xff\xd8" + sof + sos + b"\x00" * 16 + b"\xff\xd9")
