// The implicit-GEMM engine's main loop for operands that are plain matrices, in two forms.
// - Rows (r-major): reduction row r of A is `cols` elements at base + r * ld, likewise B, laid out as the
//   engine's r-major tiles are. That is a layer whose reduction rows are tensor rows (a 1x1, stride-1,
//   unpadded convolution of channels-last tensors): no im2col gather.
// - Runs (K-major): row i of A holds, for each image n, `run` consecutive reduction elements at
//   base + n * image_ld + i * ld, likewise B, laid out as the engine's K-major tiles are (wgmma.h with
//   wgmma_a_k_major and wgmma_b_k_major). That is the same layer in NGCHW: a channel's output positions
//   are contiguous within a sample. A stage holds BK positions of one sample; a sample's last stage is
//   cut short by the end of its run.
// Either way a thread's chunks of a stage are its chunks of the previous stage moved on: one pointer add
// and one compare each per stage, where igemm.h's run() works out a position, bounds and an offset for
// every chunk (about 40 warp instructions per 16-byte copy, measured by ncu on a 1x1 layer; bench/NOTES.md
// 14).
//
// The op is a class with
//   RowMatrix<T> a_rows(), b_rows()       where the block's A and B matrices start, their row pitch and width
//                                         (run_rows), or RunMatrix<T> a_runs(), b_runs() (run_runs), or
//                                         a_runs() and b_rows() (run_runs_rows)
//   CRow c_row(int m), CCol c_col(int n)  as for run()
//   void store_pair(const CRow&, const CCol& c0, const CCol& c1, float v0, float v1)   C(m, c0) and C(m, c1),
//                                         two adjacent columns, in range or not (shared memory is free
//                                         by then: a tile may be staged there)
// Needs prelude.h, mma.h, igemm.h and a configuration of tiles with one slice (wgmma.h's, or igemm.h's).
#pragma once

namespace kf_igemm {

// Element (r, c) of a matrix is base[r * ld + c], for c < cols.
template <typename T> struct RowMatrix {
  const T* base;
  long long ld;
  int cols;
};

// The chunks of V elements one thread copies into every stage of a tile of BK rows by COLS columns
// (the tile's columns c0 .. c0 + COLS of the matrix). Chunks past the matrix's width or its last row are
// zeros: a missing column spoils only outputs that are never stored, a missing row every output.
template <class Cfg, int COLS, int V, bool IS_A>
struct RowChunks {
  using T = typename Cfg::T;
  static constexpr int PER_ROW = COLS / V, TOTAL = Cfg::BK * PER_ROW, THREADS = Cfg::SLICE_THREADS;
  static constexpr int N = (TOTAL + THREADS - 1) / THREADS;
  static constexpr bool ALL_EXIST = TOTAL % THREADS == 0;
  const T* src[N];
  int row[N], dst[N];
  bool exists[N], in_width[N];
  const T* any;  // a valid address for the copies that read nothing
  int r_end;
  long long step;  // BK rows: BK * ld elements

  __device__ __forceinline__ RowChunks(const RowMatrix<T>& m, int c0, int r_begin, int r_end_)
      : any(m.base), r_end(r_end_), step(Cfg::BK * m.ld) {
    const int tid = threadIdx.x % THREADS;
#pragma unroll
    for (int i = 0; i < N; ++i) {
      const int e = tid + i * THREADS;
      exists[i] = ALL_EXIST || e < TOTAL;
      const int r = (exists[i] ? e : 0) / PER_ROW, col = (exists[i] ? e : 0) % PER_ROW * V;
      in_width[i] = c0 + col < m.cols;
      row[i] = r_begin + r;
      src[i] = m.base + (long long)row[i] * m.ld + (in_width[i] ? c0 + col : 0);
      dst[i] = IS_A ? Cfg::a_at(r, col) : Cfg::b_at(r, col);
    }
  }

  // This stage's chunks into `s`; then every chunk moves on by BK rows.
  __device__ __forceinline__ void load(kf_mma::Smem<T> s) {
#pragma unroll
    for (int i = 0; i < N; ++i) {
      if (!exists[i]) continue;
      const bool ok = in_width[i] && row[i] < r_end;
      copy<V * (int)sizeof(T)>(s + dst[i], ok ? src[i] : any, ok);
      src[i] += step;
      row[i] += Cfg::BK;
    }
  }
};

// Element (r, i) of a K-major matrix, r = n * run + p with p < run, is base[n * image_ld + i * ld + p], for
// i < rows.
template <typename T> struct RunMatrix {
  const T* base;
  long long image_ld, ld;
  int rows, run;
};

// The chunks of V elements one thread copies into every stage of a tile of ROWS rows (the matrix's rows
// r0 .. r0 + ROWS) by BK reduction elements. Stage q of the matrix holds positions p0 .. p0 + BK of sample
// q / per_run (p0 = q % per_run * BK, per_run stages a run). Chunks past the run or the matrix's last row
// are zeros (run a multiple of V: a chunk is wholly inside or outside).
template <class Cfg, int ROWS, int V, bool IS_A>
struct RunChunks {
  using T = typename Cfg::T;
  static constexpr int PER_ROW = Cfg::BK / V, TOTAL = ROWS * PER_ROW, THREADS = Cfg::SLICE_THREADS;
  static constexpr int N = (TOTAL + THREADS - 1) / THREADS;
  static constexpr bool ALL_EXIST = TOTAL % THREADS == 0;
  long long offset[N];  // row * ld + column, fixed
  int col[N], dst[N];
  bool exists[N], on_row[N];  // a chunk of the tile; on one of the matrix's rows
  const T* base;
  long long image_ld;
  int run, image, p0;  // the next stage's sample and first position

  __device__ __forceinline__ RunChunks(const RunMatrix<T>& m, int r0, int q_begin)
      : base(m.base), image_ld(m.image_ld), run(m.run) {
    const int tid = threadIdx.x % THREADS;
    const int per_run = (m.run + Cfg::BK - 1) / Cfg::BK;
    image = q_begin / per_run;
    p0 = q_begin % per_run * Cfg::BK;
#pragma unroll
    for (int i = 0; i < N; ++i) {
      const int e = tid + i * THREADS;
      exists[i] = ALL_EXIST || e < TOTAL;
      const int r = (exists[i] ? e : 0) / PER_ROW;
      col[i] = (exists[i] ? e : 0) % PER_ROW * V;
      on_row[i] = r0 + r < m.rows;
      offset[i] = (long long)(on_row[i] ? r0 + r : 0) * m.ld + col[i];
      dst[i] = IS_A ? Cfg::a_at(r, col[i]) : Cfg::b_at(r, col[i]);
    }
  }

  // This stage's chunks into `s` (a missing chunk as zeros, so a row past the matrix spoils only outputs
  // never stored); then on to the next stage's positions.
  __device__ __forceinline__ void load(kf_mma::Smem<T> s) {
    const T* const stage = base + (long long)image * image_ld + p0;
#pragma unroll
    for (int i = 0; i < N; ++i) {
      if (!exists[i]) continue;
      const bool ok = on_row[i] && p0 + col[i] < run;
      copy<V * (int)sizeof(T)>(s + dst[i], ok ? stage + offset[i] : base, ok);
    }
    p0 += Cfg::BK;
    if (p0 >= run) {
      p0 = 0;
      ++image;
    }
  }
};

// The block's finished tile (m0, n0) handed to the op: each accumulator row and column mapped to the output
// once (a lane holds few, each many times). A lane's elements 2h and 2h + 1 of a fragment are two adjacent
// columns of one row (mma.h), handed to the op together so that it may store them as one vector.
template <class Cfg, class Op>
__device__ __forceinline__ void store_tile(const Op& op, kf_mma::FragC<typename Cfg::T> (&acc)[Cfg::FM][Cfg::FN],
                                           int m0, int n0, int wm, int wn) {
  const int lane = threadIdx.x % kf_mma::LANES;
  static_assert(kf_mma::C_ELEMS == 4 && kf_mma::C_ROWS == 2 && kf_mma::C_COLS == 2, "pairs of columns per row");
  using CRow = decltype(op.c_row(0));
  using CCol = decltype(op.c_col(0));
  CRow rows[Cfg::FM][kf_mma::C_ROWS];
  CCol cols[Cfg::FN][kf_mma::C_COLS];
#pragma unroll
  for (int i = 0; i < Cfg::FM; ++i)
#pragma unroll
    for (int h = 0; h < kf_mma::C_ROWS; ++h) rows[i][h] = op.c_row(m0 + wm + i * kf_mma::M + kf_mma::c_row(h, lane));
#pragma unroll
  for (int j = 0; j < Cfg::FN; ++j)
#pragma unroll
    for (int h = 0; h < kf_mma::C_COLS; ++h) cols[j][h] = op.c_col(n0 + wn + j * kf_mma::N + kf_mma::c_col(h, lane));
#pragma unroll
  for (int i = 0; i < Cfg::FM; ++i)
#pragma unroll
    for (int j = 0; j < Cfg::FN; ++j)
#pragma unroll
      for (int h = 0; h < kf_mma::C_ROWS; ++h)
        op.store_pair(rows[i][h], cols[j][0], cols[j][1], acc[i][j].x[2 * h], acc[i][j].x[2 * h + 1]);
}

// The block's tile (m0, n0) over `tiles` stages that the chunks `a` and `b` load one after another: the
// main loop of igemm.h's run(), then op.store_pair for every pair of elements of the tile.
template <class Cfg, class Op, class AChunks, class BChunks>
__device__ __forceinline__ void run_stages(const Op& op, typename Cfg::T* smem_ptr, int m0, int n0, int tiles,
                                           AChunks& a, BChunks& b) {
  using T = typename Cfg::T;
  static_assert(Cfg::SLICES == 1, "one pipeline");
  const unsigned long long base = reinterpret_cast<unsigned long long>(smem_ptr);
  T* const aligned = reinterpret_cast<T*>((base + Cfg::SMEM_ALIGN - 1) / Cfg::SMEM_ALIGN * Cfg::SMEM_ALIGN);
  const kf_mma::Smem<T> smem = kf_mma::smem(aligned);
  int wm, wn;
  Cfg::warp_origin(threadIdx.x / kf_mma::LANES, wm, wn);
  using Acc = typename kf_mma::FragC<T>::Acc;
  kf_mma::FragC<T> acc[Cfg::FM][Cfg::FN];
  for_each_acc<Cfg>(acc, [](Acc& v, int) { v = 0; });

  const auto load = [&](int t) {
    const kf_mma::Smem<T> s = smem + (t % Cfg::STAGES) * Cfg::STAGE;
    a.load(s);
    b.load(s + Cfg::A_ELEMS);
  };
#pragma unroll
  for (int t = 0; t < Cfg::STAGES - 1; ++t) {
    if (t < tiles) load(t);
    commit();
  }
  for (int t = 0; t < tiles; ++t) {
    wait<Cfg::STAGES - 2>();
    if constexpr (Cfg::ASYNC_PROXY) publish_to_async_proxy();
    __syncthreads();  // stage t is complete for every thread; stage t - 1 is no longer read
    if (t + Cfg::STAGES - 1 < tiles) load(t + Cfg::STAGES - 1);
    commit();
    Cfg::compute(smem + (t % Cfg::STAGES) * Cfg::STAGE, acc, wm, wn);
  }

  // Every warp is done with the pipeline's shared memory before the tile is stored: an op may stage it there.
  __syncthreads();
  store_tile<Cfg>(op, acc, m0, n0, wm, wn);
}

// The block's tile (m0, n0) over reduction rows [r_begin, r_end) of row matrices (r-major tiles).
template <class Cfg, class Op>
__device__ __forceinline__ void run_rows(const Op& op, typename Cfg::T* smem_ptr, int m0, int n0, int r_begin, int r_end) {
  static_assert(Cfg::A_RMAJOR && Cfg::B_RMAJOR, "r-major tiles");
  RowChunks<Cfg, Cfg::BM, Cfg::VA, true> a(op.a_rows(), m0, r_begin, r_end);
  RowChunks<Cfg, Cfg::BN, Cfg::VB, false> b(op.b_rows(), n0, r_begin, r_end);
  const int tiles = r_end > r_begin ? (r_end - r_begin + Cfg::BK - 1) / Cfg::BK : 0;
  run_stages<Cfg>(op, smem_ptr, m0, n0, tiles, a, b);
}

// The block's tile (m0, n0) over stages [q_begin, q_end) of run matrices (K-major tiles).
template <class Cfg, class Op>
__device__ __forceinline__ void run_runs(const Op& op, typename Cfg::T* smem_ptr, int m0, int n0, int q_begin, int q_end) {
  static_assert(!Cfg::A_RMAJOR && !Cfg::B_RMAJOR, "K-major tiles");
  RunChunks<Cfg, Cfg::BM, Cfg::VA, true> a(op.a_runs(), m0, q_begin);
  RunChunks<Cfg, Cfg::BN, Cfg::VB, false> b(op.b_runs(), n0, q_begin);
  run_stages<Cfg>(op, smem_ptr, m0, n0, q_end > q_begin ? q_end - q_begin : 0, a, b);
}

// The block's tile (m0, n0) over the whole reduction of a run matrix A (K-major, one run a row: a channels-last
// tensor's positions as rows of `run` channels) by a row matrix B (r-major: a weight's rows).
template <class Cfg, class Op>
__device__ __forceinline__ void run_runs_rows(const Op& op, typename Cfg::T* smem_ptr, int m0, int n0) {
  static_assert(!Cfg::A_RMAJOR && Cfg::B_RMAJOR, "K-major A, r-major B");
  const RunMatrix<typename Cfg::T> am = op.a_runs();
  RunChunks<Cfg, Cfg::BM, Cfg::VA, true> a(am, m0, 0);
  RowChunks<Cfg, Cfg::BN, Cfg::VB, false> b(op.b_rows(), n0, 0, am.run);
  run_stages<Cfg>(op, smem_ptr, m0, n0, (am.run + Cfg::BK - 1) / Cfg::BK, a, b);
}

}  // namespace kf_igemm
