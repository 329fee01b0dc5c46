#!/usr/bin/env python3
"""Read rate of a decode linear's weight stream by the way it is loaded (ring_probe.cu).

Compiles ring_probe.cu with NVRTC (sm_90a; through tools/sass.py's `nvrtc_cubin`), launches its
kernels through the driver API inside CUDA graphs that PyTorch captures, and prints GB/s per
(weight shape, kernel, blocks per SM, layout): back to back over 8 copies of the weight (one
graph of 32 launches; L2 holds none) and one launch alone (a graph of one launch: its replay's
time). Needs PyTorch and the CUDA driver; `--compile-only` checks the source here without a GPU.

    python3 tools/gpu/ring_probe.py [--compile-only]
"""
import ctypes
import glob
import os
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))
from sass import nvrtc_cubin  # noqa: E402  (tools/sass.py: the NVRTC call and its log)
KERNELS = ["ring_s4", "ring_s8", "ring_s16", "ldg_u2", "ldg_u4", "ldg_u8"]


def load_nvrtc():
    names = ["libnvrtc.so", "libnvrtc.so.13", "libnvrtc.so.12"]
    for pat in ["/usr/local/cuda/lib64/libnvrtc.so*", "/usr/local/cuda*/targets/*/lib/libnvrtc.so*"]:
        names += sorted(glob.glob(pat))
    for p in sys.path:
        names += sorted(glob.glob(os.path.join(p, "nvidia", "cu*", "lib", "libnvrtc.so*")))
        names += sorted(glob.glob(os.path.join(p, "nvidia", "cuda_nvrtc", "lib", "libnvrtc.so*")))
    for n in names:
        if "builtins" in n or "alt" in n:
            continue
        try:
            return ctypes.CDLL(n)
        except OSError:
            pass
    raise SystemExit("no libnvrtc found")


def compile_cubin(src, arch="sm_90a"):
    opts = [f"--gpu-architecture={arch}", "-std=c++17", "-default-device"]
    return nvrtc_cubin(load_nvrtc(), src.encode(), "ring_probe.cu", opts)


class Driver:
    def __init__(self, cubin):
        self.cu = ctypes.CDLL("libcuda.so.1")
        self.check(self.cu.cuInit(0), "cuInit")
        ctx = ctypes.c_void_p()
        self.check(self.cu.cuCtxGetCurrent(ctypes.byref(ctx)), "cuCtxGetCurrent")
        if not ctx.value:
            dev = ctypes.c_int()
            self.check(self.cu.cuDeviceGet(ctypes.byref(dev), 0), "cuDeviceGet")
            self.check(self.cu.cuDevicePrimaryCtxRetain(ctypes.byref(ctx), dev), "retain")
            self.check(self.cu.cuCtxSetCurrent(ctx), "cuCtxSetCurrent")
        self.mod = ctypes.c_void_p()
        self.check(self.cu.cuModuleLoadData(ctypes.byref(self.mod), cubin), "cuModuleLoadData")
        self.fns = {}

    def check(self, rc, what):
        if rc != 0:
            raise SystemExit(f"{what}: CUDA error {rc}")

    def fn(self, name):
        if name not in self.fns:
            f = ctypes.c_void_p()
            self.check(self.cu.cuModuleGetFunction(ctypes.byref(f), self.mod, name.encode()), name)
            # CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES = 8
            self.check(self.cu.cuFuncSetAttribute(f, 8, 227 << 10), "max dynamic smem")
            self.fns[name] = f
        return self.fns[name]

    def launch(self, name, grid, block, smem, stream, args):
        vals = [ctypes.c_uint64(a) if isinstance(a, Ptr) else ctypes.c_int(a) for a in args]
        ptrs = (ctypes.c_void_p * len(vals))(*[ctypes.cast(ctypes.byref(v), ctypes.c_void_p) for v in vals])
        self.check(self.cu.cuLaunchKernel(self.fn(name), grid, 1, 1, block, 1, 1, smem, ctypes.c_void_p(stream),
                                          ptrs, None), name)


class Ptr(int):
    pass


def main():
    src = open(os.path.join(HERE, "ring_probe.cu")).read()
    cubin = compile_cubin(src)
    if "--compile-only" in sys.argv:
        print(f"compiled: {len(cubin)} bytes of cubin")
        return
    import torch

    torch.zeros(1, device="cuda")
    drv = Driver(cubin)
    for kern in KERNELS:  # resolved outside any capture
        drv.fn(kern)
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    sink = torch.zeros(4, dtype=torch.int32, device="cuda")
    # Clocks up first: 3 s of copies (the GPU idles at low clocks: 345 MHz before a call).
    a = torch.empty(1 << 30, dtype=torch.uint8, device="cuda")
    b = torch.empty_like(a)
    t0 = time.time()
    while time.time() - t0 < 3:
        for _ in range(20):
            b.copy_(a)
        torch.cuda.synchronize()
    del a, b
    print(f"# {torch.cuda.get_device_name()}, {sms} SMs")
    # (name, row groups, row bytes ld, columns per tile K): V4-Flash's 32-MB FP8 linears as
    # linear_wg splits them at 16 tokens.
    shapes = [("wq_b", 512, 1024, 1024), ("wo_b/4", 64, 8192, 2048), ("wo_a/2", 128, 4096, 2048)]
    print("| weight | kernel | blocks/SM | grid | row-major GB/s (µs) | tiled GB/s (µs) | row-major alone µs | tiled alone µs |")
    print("|---|---|---|---|---|---|---|---|")
    for name, rg, ld, k in shapes:
        nbytes = rg * 64 * ld
        tiles = rg * (ld // k)
        ws = [torch.randint(0, 255, (nbytes,), dtype=torch.uint8, device="cuda") for _ in range(8)]
        for kern in KERNELS:
            stages = int(kern.split("_s")[1]) if kern.startswith("ring") else 0
            for per_sm in [1, 2, 4, 8]:
                ring = stages * 8192
                # Shared memory per block that lets at most per_sm blocks share an SM (228 KiB per
                # SM, 1 KiB reserved per block, 1 KiB spare); at 8 the grid alone sets it.
                budget = (228 << 10) // per_sm - 2048
                if ring > budget:
                    continue
                smem = budget if per_sm < 8 else ring
                grid = min(tiles, per_sm * sms)
                res = []
                for tiled in (0, 1):
                    # Launched from CUDA graphs: from Python each launch costs more than the kernel.
                    def capture(bufs):
                        g = torch.cuda.CUDAGraph()
                        with torch.cuda.graph(g):
                            st = torch.cuda.current_stream().cuda_stream
                            for w in bufs:
                                drv.launch(kern, grid, 128, smem, st,
                                           [Ptr(w.data_ptr()), tiles, k, tiled, rg, ld, 0x1e3779b9, Ptr(sink.data_ptr())])
                        return g
                    chain = capture(ws * 4)
                    ones = [capture([w]) for w in ws]
                    chain.replay()
                    torch.cuda.synchronize()
                    best = float("inf")
                    for _ in range(5):
                        e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                        e0.record()
                        chain.replay()
                        e1.record()
                        torch.cuda.synchronize()
                        best = min(best, e0.elapsed_time(e1) * 1e3 / 32)
                    alone = float("inf")
                    for i in range(16):
                        e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                        e0.record()
                        ones[i % 8].replay()
                        e1.record()
                        torch.cuda.synchronize()
                        alone = min(alone, e0.elapsed_time(e1) * 1e3)
                    res.append((best, alone))
                (b0, a0), (b1, a1) = res
                print(f"| {name} | {kern} | {per_sm} | {grid} | {nbytes / b0 / 1e3:.0f} ({b0:.1f}) | "
                      f"{nbytes / b1 / 1e3:.0f} ({b1:.1f}) | {a0:.1f} | {a1:.1f} |")
        del ws


if __name__ == "__main__":
    main()
