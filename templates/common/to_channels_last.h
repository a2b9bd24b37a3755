// The transposing pass of NGCHW problems: src[n][c][s] -> dst[n][s][c] (channels = G * C or G * K,
// s the spatial position), a 64 x 64 tile of (c, s) per block through shared memory, so both the
// reads (along s) and the writes (along c) are coalesced, in the widest vectors (up to 16 bytes) that
// divide both extents. Grid: (s tiles, c tiles, N), 256 threads.
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

extern "C" __global__ void __launch_bounds__(TRANSPOSE_THREADS) kf_to_channels_last(const TIN* src, TIN* dst, int channels,
                                                                                int spatial) {
  constexpr int V = 16 / (int)sizeof(TIN);
  __shared__ kf_vec<TIN, V> space[TRANSPOSE_TILE * (TRANSPOSE_TILE / V + 1)];  // the widest tile, 16-byte aligned
  transpose_widest<V>(src, dst, channels, spatial, reinterpret_cast<unsigned char*>(space));
}
