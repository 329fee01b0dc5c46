// Warpgroup MMA helpers (sm_90a `wgmma`) shared by the modules that use them (attention_wg.cu,
// linear_wg.cu): shared-memory matrix descriptors in the 128-byte swizzle, the fence / commit /
// wait of an MMA group, the async-proxy fence for operands written by threads, and the swizzled
// address of a 16-byte piece.

#if defined(__CUDA_ARCH_FEAT_SM90_ALL)

// Shared-memory matrix descriptors (PTX ISA, "matrix descriptor format"), 128-byte swizzle:
// the low word holds the start address / 16 and the leading byte offset / 16, the high word the
// stride byte offset / 16 and the swizzle mode. Every descriptor here strides 1024 bytes (8 rows
// of 128) and only the low word moves, so the MMAs take it as a 32-bit value.
__device__ __forceinline__ u32 wg_desc_lo(const void* smem, u32 lbo) {
    return (((u32)__cvta_generic_to_shared(smem) & 0x3ffff) >> 4) | ((lbo >> 4) << 16);
}
#define WG_DESC_HI "0x40000040"  // (1024 / 16) | 128-byte swizzle (1 << 62)

__device__ __forceinline__ void wg_fence() { asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory"); }
__device__ __forceinline__ void wg_commit() { asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory"); }
template <int N>
__device__ __forceinline__ void wg_wait() { asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(N) : "memory"); }
// Generic-proxy writes to shared memory (stores, cp.async) made visible to the tensor cores'
// async-proxy reads; each writer runs it before the barrier that publishes the data.
__device__ __forceinline__ void fence_async_smem() { asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory"); }
// Keeps the compiler from moving accumulator reads or writes across a wgmma wait or issue.
__device__ __forceinline__ void wg_pin(float& r) { asm volatile("" : "+f"(r)::"memory"); }

#define WG_F4(a, i) "+f"(a[i]), "+f"(a[i + 1]), "+f"(a[i + 2]), "+f"(a[i + 3])
#define WG_F16(a, i) WG_F4(a, i), WG_F4(a, i + 4), WG_F4(a, i + 8), WG_F4(a, i + 12)

// Byte offset of (row r, 16-byte piece j of its 64-column chunk) in a swizzled chunk.
__device__ __forceinline__ u32 sw128(int r, int j) { return (u32)(r * 128 + ((j ^ (r & 7)) << 4)); }

#endif
