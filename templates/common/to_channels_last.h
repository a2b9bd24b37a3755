// The transposing pass of NGCHW problems: src[n][c][s] -> dst[n][s][c] (channels = G * C or G * K,
// s the spatial position), a 64 x 64 tile of (c, s) per block through shared memory, so both the
// reads (along s) and the writes (along c) are coalesced, in the widest vectors (up to 16 bytes) that
// divide both extents (or, for short odd planes, along the whole run of a block's planes: transpose_flat).
// Grid: (s tiles, c tiles, N), 256 threads.
constexpr int TRANSPOSE_TILE = {{ transpose_tile }}, TRANSPOSE_THREADS = {{ transpose_threads }};

// `space`: T rows of T + V elements (a row c holds positions s0 .. s0 + T in vectors, padded a vector).
template <int V>
__device__ __forceinline__ void transpose_tile(const TIN* src, TIN* dst, int channels, int spatial, unsigned char* space) {
  using Vec = kf_vec<TIN, V>;
  constexpr int T = TRANSPOSE_TILE, PER_ROW = T / V;
  Vec (*tile)[PER_ROW + 1] = reinterpret_cast<Vec (*)[PER_ROW + 1]>(space);
  const long long sample = (long long)blockIdx.z * channels * spatial;
  const int s0 = blockIdx.x * T, c0 = blockIdx.y * T;
  for (int i = threadIdx.x; i < T * PER_ROW; i += TRANSPOSE_THREADS) {
    const int c = c0 + i / PER_ROW, s = s0 + (i % PER_ROW) * V;
    if (c < channels && s < spatial)
      tile[i / PER_ROW][i % PER_ROW] = *reinterpret_cast<const Vec*>(src + sample + (long long)c * spatial + s);
  }
  __syncthreads();
  for (int i = threadIdx.x; i < T * PER_ROW; i += TRANSPOSE_THREADS) {
    const int sl = i / PER_ROW, cv = i % PER_ROW, s = s0 + sl, c = c0 + cv * V;
    if (c >= channels || s >= spatial) continue;
    Vec out;
#pragma unroll
    for (int j = 0; j < V; ++j) out.v[j] = tile[cv * V + j][sl / V].v[sl % V];
    *reinterpret_cast<Vec*>(dst + sample + (long long)s * channels + c) = out;
  }
}

// The widest V (halving from 16 bytes) that divides both extents, so every vector is aligned.
template <int V>
__device__ __forceinline__ void transpose_widest(const TIN* src, TIN* dst, int channels, int spatial, unsigned char* space) {
  if constexpr (V == 1) {
    transpose_tile<1>(src, dst, channels, spatial, space);
  } else {
    if (channels % V == 0 && spatial % V == 0) transpose_tile<V>(src, dst, channels, spatial, space);
    else transpose_widest<V / 2>(src, dst, channels, spatial, space);
  }
}

// Planes too short and odd for vectors along s (7x7: 49 positions) where the other extent takes them. With
// FLAT_IN, spatial <= T: a block's T channels are T x spatial consecutive elements of src, read as one run
// of V-element vectors; the rows of dst are written V channels at a time. Without it, channels <= T (a
// channels-last tensor going back, its positions the channels here): src rows are read V positions at a
// time and the block's T positions of dst are one run, written as V-element vectors. `space`: the tile as
// T rows (c) of PITCH elements (s), PITCH a word past T so a column's elements lie in distinct banks.
template <int V, bool FLAT_IN>
__device__ __forceinline__ void transpose_flat(const TIN* src, TIN* dst, int channels, int spatial, unsigned char* space) {
  using Vec = kf_vec<TIN, V>;
  constexpr int T = TRANSPOSE_TILE, PER_ROW = T / V, PITCH = T + 4 / (int)sizeof(TIN);
  TIN* const tile = reinterpret_cast<TIN*>(space);
  const long long sample = (long long)blockIdx.z * channels * spatial;
  const int s0 = blockIdx.x * T, c0 = blockIdx.y * T;
  if constexpr (FLAT_IN) {  // one block column: s0 == 0
    const int n = min(T, channels - c0) * spatial;
    const TIN* const from = src + sample + (long long)c0 * spatial;
    for (int e = threadIdx.x * V; e < n; e += TRANSPOSE_THREADS * V) {
      const Vec v = *reinterpret_cast<const Vec*>(from + e);
      int c = e / spatial, s = e - c * spatial;
#pragma unroll
      for (int j = 0; j < V; ++j) {
        tile[c * PITCH + s] = v.v[j];
        if (++s == spatial) s = 0, ++c;
      }
    }
  } else {
    for (int i = threadIdx.x; i < T * PER_ROW; i += TRANSPOSE_THREADS) {
      const int cl = i / PER_ROW, sl = i % PER_ROW * V;
      if (c0 + cl >= channels || s0 + sl >= spatial) continue;
      const Vec v = *reinterpret_cast<const Vec*>(src + sample + (long long)(c0 + cl) * spatial + s0 + sl);
#pragma unroll
      for (int j = 0; j < V; ++j) tile[cl * PITCH + sl + j] = v.v[j];
    }
  }
  __syncthreads();
  if constexpr (FLAT_IN) {
    for (int i = threadIdx.x; i < T * PER_ROW; i += TRANSPOSE_THREADS) {
      const int sl = i / PER_ROW, cl = i % PER_ROW * V;
      if (c0 + cl >= channels || s0 + sl >= spatial) continue;
      Vec out;
#pragma unroll
      for (int j = 0; j < V; ++j) out.v[j] = tile[(cl + j) * PITCH + sl];
      *reinterpret_cast<Vec*>(dst + sample + (long long)(s0 + sl) * channels + c0 + cl) = out;
    }
  } else {  // one block row: c0 == 0
    const int n = min(T, spatial - s0) * channels;
    TIN* const to = dst + sample + (long long)s0 * channels;
    for (int e = threadIdx.x * V; e < n; e += TRANSPOSE_THREADS * V) {
      int s = e / channels, c = e - s * channels;
      Vec out;
#pragma unroll
      for (int j = 0; j < V; ++j) {
        out.v[j] = tile[c * PITCH + s];
        if (++c == channels) c = 0, ++s;
      }
      *reinterpret_cast<Vec*>(to + e) = out;
    }
  }
}

extern "C" __global__ void __launch_bounds__(TRANSPOSE_THREADS) kf_to_channels_last(const TIN* src, TIN* dst, int channels,
                                                                                int spatial) {
  constexpr int V = 16 / (int)sizeof(TIN);
  __shared__ kf_vec<TIN, V> space[TRANSPOSE_TILE * (TRANSPOSE_TILE / V + 1)];  // the widest tile, 16-byte aligned
  unsigned char* const tile = reinterpret_cast<unsigned char*>(space);
  if (spatial % V && spatial <= TRANSPOSE_TILE && channels % V == 0) transpose_flat<V, true>(src, dst, channels, spatial, tile);
  else if (channels % V && channels <= TRANSPOSE_TILE && spatial % V == 0) transpose_flat<V, false>(src, dst, channels, spatial, tile);
  else transpose_widest<V>(src, dst, channels, spatial, tile);
}
