#!/usr/bin/env python3
"""Instruction mix of a kernel's SASS, without a GPU: compiles one module of kernels/cuda with
NVRTC (as amdahl-kernels' `Module::full_source` composes it, same options as the engine) to an
sm_90 cubin, disassembles the named entry points with cuobjdump and counts opcodes, for the
whole function and for its hottest loop (the innermost loop holding the most MMAs, else the
innermost loop with the most FFMAs).

Predicting a kernel change from its instruction counts (docs/PERF.md) needs no device time; the
measurement still does.

    python3 -m venv target/nvrtc-venv
    target/nvrtc-venv/bin/pip install nvidia-cuda-nvrtc==13.0.88 nvidia-cuda-cuobjdump==13.2.* nvidia-cuda-nvdisasm==13.2.*
    target/nvrtc-venv/bin/python tools/sass.py linear moe_up_w_nvfp4t stream_up_nvfp4t

Pipes, as the Hopper tuning guides and ncu name them: ALU (LOP3, PRMT, SHF, LEA, IADD3, ISETP,
...) issues a warp instruction every 2 cycles per SM sub-partition, so does the FMA-heavy pipe
(IMAD, HMUL2 ...); the tensor pipe takes HMMA.
"""

import argparse
import collections
import ctypes
import glob
import os
import re
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CUDA = os.path.join(ROOT, "kernels", "cuda")
# Module name -> its private headers, in the order kernels/src/lib.rs lists them.
LINEAR_HEADERS = ["linear_formats.cuh", "linear_shared.cuh"]
HEADERS = {"linear": LINEAR_HEADERS + ["linear_core.cuh", "linear_persist.cuh", "linear_experts.cuh",
                                        "linear_router.cuh"],
           "linear_stream": LINEAR_HEADERS, "linear_gemm": LINEAR_HEADERS,
           "linear_wg": LINEAR_HEADERS + ["wgmma.cuh"],
           "attention": ["attention_shared.cuh"], "attention_wg": ["attention_shared.cuh", "wgmma.cuh"]}
ALU = {"LOP3", "PRMT", "SHF", "LEA", "IADD3", "ISETP", "SEL", "FLO", "POPC", "BFE", "BFI", "IABS",
       "IMNMX", "VIMNMX", "PLOP3", "LOP", "SHL", "SHR", "MOV"}
FMA = {"IMAD", "HMUL2", "HFMA2", "HADD2", "FFMA", "FMUL", "FADD", "VIADD"}


def nvidia_dirs():
    venv = os.path.join(ROOT, "target", "nvrtc-venv")
    return glob.glob(os.path.join(venv, "lib", "python3*", "site-packages", "nvidia", "cu13"))


def find(sub, pattern):
    for d in nvidia_dirs():
        hits = sorted(glob.glob(os.path.join(d, sub, pattern)))
        if hits:
            return hits[0]
    sys.exit(f"{pattern} not found under target/nvrtc-venv (see this file's header)")


def full_source(module):
    with open(os.path.join(CUDA, "common.cuh")) as f:
        s = f.read()
    for h in HEADERS.get(module, []):
        with open(os.path.join(CUDA, h)) as f:
            s += f'\n#line 1 "{h}"\n' + f.read()
    with open(os.path.join(CUDA, module + ".cu")) as f:
        return s + f'\n#line 1 "{module}.cu"\n' + f.read()


def check(result, what):
    if result != 0:
        sys.exit(f"{what} failed (nvrtcResult {result})")


def nvrtc_cubin(nv, src, name, opts):
    """The CUBIN of CUDA source `src` (bytes) compiled by the loaded NVRTC library `nv` with
    options `opts` (strings); exits with NVRTC's log on an error. (tools/gpu/ring_probe.py uses
    it with the GPU machine's NVRTC.)"""
    prog = ctypes.c_void_p()
    check(nv.nvrtcCreateProgram(ctypes.byref(prog), src, name.encode(), 0, None, None), "nvrtcCreateProgram")
    arr = (ctypes.c_char_p * len(opts))(*[o.encode() for o in opts])
    r = nv.nvrtcCompileProgram(prog, len(opts), arr)
    size = ctypes.c_size_t()
    nv.nvrtcGetProgramLogSize(prog, ctypes.byref(size))
    log = ctypes.create_string_buffer(size.value)
    nv.nvrtcGetProgramLog(prog, log)
    if r != 0:
        sys.exit(log.value.decode(errors="replace"))
    nv.nvrtcGetCUBINSize(prog, ctypes.byref(size))
    cubin = ctypes.create_string_buffer(size.value)
    check(nv.nvrtcGetCUBIN(prog, cubin), "nvrtcGetCUBIN")
    return cubin.raw


def compile_cubin(module, arch, defines):
    # NVRTC dlopens its builtins by name: load them first, globally.
    ctypes.CDLL(find("lib", "libnvrtc-builtins.so.13.0"), mode=ctypes.RTLD_GLOBAL)
    nv = ctypes.CDLL(find("lib", "libnvrtc.so.13"))
    # As the engine (compile.rs): sm_90 as sm_90a, for the warpgroup MMAs.
    opts = [f"--gpu-architecture=sm_{arch}{'a' if arch == 90 else ''}", "--std=c++17", "-default-device"]
    opts += [f"-D{d}" for d in defines]
    return nvrtc_cubin(nv, full_source(module).encode(), f"{module}.cu", opts)


LINE = re.compile(r"/\*([0-9a-f]{4,})\*/\s+(@!?U?P[0-9T]\s+)?([A-Z][A-Z0-9_]*)(\.[A-Z0-9_.]+)?\s*([^;]*);")


def parse(sass):
    """(address, opcode, operands) of every instruction."""
    out = []
    for m in LINE.finditer(sass):
        out.append((int(m.group(1), 16), m.group(3), m.group(5)))
    return out


def hottest_loop(ins):
    """The body [target, branch] of the backward branch with the most MMAs, the shortest of
    those (the innermost loop that holds them); without MMAs, the innermost loop (no backward
    branch inside) with the most FFMAs, then the most instructions."""
    loops = []
    for addr, op, args in ins:
        m = re.search(r"0x([0-9a-f]+)", args) if op == "BRA" else None
        if m and int(m.group(1), 16) <= addr:
            loops.append((int(m.group(1), 16), addr))
    best, key = None, None
    for tgt, end in loops:
        body = [x for x in ins if tgt <= x[0] <= end]
        mma = sum(x[1].startswith("HMMA") for x in body)
        inner = not any(tgt <= t2 and e2 < end for t2, e2 in loops if (t2, e2) != (tgt, end))
        if mma:
            k = (2, mma, -len(body))
        elif inner:
            k = (1, sum(x[1] == "FFMA" for x in body), len(body))
        else:
            continue
        if key is None or k > key:
            best, key = body, k
    return best


def mix(ins):
    c = collections.Counter(op for _, op, _ in ins)
    alu = sum(n for op, n in c.items() if op in ALU)
    fma = sum(n for op, n in c.items() if op in FMA)
    mma = sum(n for op, n in c.items() if op.startswith("HMMA"))
    top = ", ".join(f"{op} {n}" for op, n in c.most_common(14))
    per = ""
    if mma:
        per = f"; per MMA: ALU {alu / mma:.2f}, FMA {fma / mma:.2f}, all {len(ins) / mma:.2f}"
    return f"{len(ins)} instructions (ALU {alu}, FMA-pipe {fma}, MMA {mma}{per})\n      {top}"


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("module", help="kernels/cuda/<module>.cu")
    ap.add_argument("functions", nargs="+", help="entry points (extern \"C\" names)")
    ap.add_argument("--arch", type=int, default=90)
    ap.add_argument("-D", dest="defines", action="append", default=[], help="extra define")
    ap.add_argument("--dump", action="store_true", help="print the hottest loop's SASS")
    a = ap.parse_args()
    cubin = compile_cubin(a.module, a.arch, a.defines)
    path = os.path.join(ROOT, "target", "tmp", f"sass-{a.module}.cubin")
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "wb") as f:
        f.write(cubin)
    cuobjdump = find("bin", "cuobjdump")
    for fn in a.functions:
        sass = subprocess.run([cuobjdump, "-sass", "-fun", fn, path], capture_output=True,
                              text=True, check=True).stdout
        ins = parse(sass)
        if not ins:
            sys.exit(f"{fn}: not in module {a.module}")
        print(f"{fn}:\n  function: {mix(ins)}")
        loop = hottest_loop(ins)
        if loop:
            print(f"  hottest loop [{loop[0][0]:#x}, {loop[-1][0]:#x}]: {mix(loop)}")
            if a.dump:
                for addr, op, args in loop:
                    print(f"    {addr:#06x} {op} {args}")


if __name__ == "__main__":
    main()
