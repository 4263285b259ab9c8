// Q5_0, Q8_0 and Q4_K weights repacked at load into groups of 8 rows for the fast CPU backend's
// decode GEMV (not a GGUF form: the CUDA backend and the reference keep the GGUF blocks).
// In the GGUF layout every 32-value block's f16 scale and (Q5_0) fifth bits are unpacked on
// each read, per row; here block b of 8 rows sits together, so one vector op serves 8 rows:
// the 8 scales convert in one instruction, the fifth bits of 8 rows are one 32-byte plane,
// and the input's 4-value groups are broadcast against 4 values of each of the 8 rows
// (output lane r = row r). The same bytes as the GGUF form (8 x 22, 8 x 34 and 8 x 144 per
// block).
//
// Layout of group g (rows 8 g .. 8 g + 7; a row count not a multiple of 8 is padded with rows
// of zeros), at byte 8 g row_bytes, block b at 8 b block_bytes within it:
//   d[8]        u16 (f16), row r's block scale at r
//   Q5_0: qh[32] byte 4 r + j, bit q: the fifth bit of row r, column 4 q + j (q = 0..7)
//         qs[4][32] vector v, byte 4 r + j: row r's GGUF qs[4 v + j] (low nibble column
//                   4 v + j, high nibble column 16 + 4 v + j)
//   Q8_0: qs[8][32] vector q, byte 4 r + j: row r, column 4 q + j
//   Q4_K (blocks of 256): d[8], then dmin[8] (u16, f16), then the 12 packed scale bytes as three
//         u32 planes: words[3][8], plane k lane r = row r's GGUF scales[4 k .. 4 k + 4), so one
//         vector op unpacks a step of the 6-bit scales and mins of all 8 rows;
//         qs[32][32] vector 8 c + q, byte 4 r + j: row r's GGUF qs[32 c + 4 q + j] (low nibble:
//         sub-block 2 c, column 64 c + 4 q + j; high nibble: sub-block 2 c + 1, column
//         64 c + 32 + 4 q + j)
#pragma once

#include <cstddef>
#include <cstdint>

#include "backend/cpu/kernels.h"
#include "backend/cpu/quant_dot.h"
#include "tensor/dtype.h"

namespace akv {

inline constexpr std::int64_t kRepackRows = 8;

// Whether `t` has a repacked form (Q5_0, Q8_0, Q4_K).
bool repackable(DType t);
// The input blocks its repacked kernel takes: ActBlock32 (Q5_0's too, not the GGUF kernel's
// pairs), ActBlock256 for Q4_K.
ActFormat repacked_act_format(DType t);
// Bytes of the repacked form of a [rows, cols] matrix: rows rounded up to kRepackRows.
std::size_t repacked_bytes(DType t, std::int64_t rows, std::int64_t cols);
// Row groups [g0, g1) of the GGUF-block matrix `gguf` [rows, cols] into `out` (repacked_bytes
// long; each call writes only its groups' bytes, so groups may be split over threads).
void repack_groups(DType t, const void* gguf, std::int64_t rows, std::int64_t cols, std::int64_t g0,
                   std::int64_t g1, void* out);
// Row r of a repacked matrix back in GGUF blocks (dtype_row_bytes(t, cols) bytes at `out`).
void unpack_row(DType t, const void* repacked, std::int64_t cols, std::int64_t r, void* out);

// out[8 i + r] = sum_k w[8 i + r][k] x[k] for the n_groups row groups starting at w (of
// `n_blocks` blocks each) against one input row quantized as repacked_act_format(w). Each
// row's result depends on that row and the input only.
using RepackedDotFn = void (*)(const void* w, std::int64_t n_blocks, const void* act_row,
                               std::int64_t n_groups, float* out);

// The kernel of repacked weight type w on `isa`, or null (Scalar: none; AVX-512 uses VNNI
// where the CPU has it, as find_quant_dot).
RepackedDotFn find_repacked_dot(Isa isa, DType w);
RepackedDotFn find_repacked_dot_avx2(DType w);  // quant_dot_avx2.cpp
RepackedDotFn find_repacked_dot_vnni(DType w);  // quant_dot_vnni.cpp

// out[m - m0] for rows [m0, m1) of the repacked matrix at w (row_bytes = dtype_row_bytes):
// whole groups straight into out, a group cut by m0 or m1 through a scratch of 8.
void dot_repacked_rows(RepackedDotFn dot, const void* w, std::size_t row_bytes,
                       std::int64_t n_blocks, const void* act_row, std::int64_t m0, std::int64_t m1,
                       float* out);

}  // namespace akv
