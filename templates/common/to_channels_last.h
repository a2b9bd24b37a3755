// The transposing pass of NGCHW problems: src[n][c][s] -> dst[n][s][c] (channels = G * C or G * K,
// s the spatial position). Where the channels are whole 16-byte vectors of a 2- or 4-byte type and the
// positions whole 16- or 8-byte ones, each lane transposes a block of them in its registers
// (kf_to_channels_last_c*s*); otherwise a 64 x 64 tile of (c, s) per block goes through shared memory
// (kf_to_channels_last), so both the reads (along s) and the writes (along c) are coalesced, in the widest
// vectors (up to 16 bytes) that divide both extents (or, for short odd planes, along the whole run of a
// block's planes: transpose_flat).
// Grid: (s tiles, c tiles, N), 256 threads (squares: (s tiles x c tiles, 1, N)).
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

// A lane reads CV channels' runs of SV positions (16 bytes of them, in loads of LV), swaps them in its
// registers and writes SV positions' runs of CV channels: no shared memory, no barrier (the tile kernel's
// 2-byte reads of its shared tile meet 8-way bank conflicts). Lanes lie SQUARE_LANES_C along channels by
// 32 / SQUARE_LANES_C along positions, so a warp reads 128 contiguous bytes of each channel row it touches
// (in two halves where LV < SV: 8-byte loads keep the 128-byte runs that DRAM streams best) and writes 64
// of each position row; a block's warps lie SQUARE_WARPS_C along channels. CV divides the channels and LV
// the positions (the host's choice): a lane's last load, and the positions it writes, may lie past the
// plane only by whole loads.
constexpr int SQUARE_LANES_C = {{ square_lanes_c }}, SQUARE_WARPS_C = {{ square_warps_c }};
constexpr int SQUARE_WIDE = sizeof(TIN) == 1 ? 8 : 16 / (int)sizeof(TIN);  // elements in 16 bytes (1-byte: 8)

template <int CV, int LV>
__device__ __forceinline__ void transpose_squares(const TIN* src, TIN* dst, int channels, int spatial) {
  constexpr int SV = SQUARE_WIDE, LANES_S = 32 / SQUARE_LANES_C, WARPS_S = TRANSPOSE_THREADS / 32 / SQUARE_WARPS_C;
  constexpr int TILE_C = SQUARE_WARPS_C * SQUARE_LANES_C * CV, TILE_S = WARPS_S * LANES_S * SV;
  const int s_tiles = (spatial + TILE_S - 1) / TILE_S;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int c = (int)(blockIdx.x / s_tiles) * TILE_C + (warp % SQUARE_WARPS_C * SQUARE_LANES_C + lane % SQUARE_LANES_C) * CV;
  const int s = (int)(blockIdx.x % s_tiles) * TILE_S + (warp / SQUARE_WARPS_C * LANES_S + lane / SQUARE_LANES_C) * SV;
  if (c >= channels || s >= spatial) return;
  const int here = min(SV, spatial - s);  // positions of this lane inside the plane, a multiple of LV
  const long long sample = (long long)blockIdx.z * channels * spatial;
  kf_vec<TIN, SV> in[CV];
#pragma unroll
  for (int j = 0; j < CV; ++j) {
#pragma unroll
    for (int h = 0; h < SV; h += LV)
      if (h < here)
        *reinterpret_cast<kf_vec<TIN, LV>*>(&in[j].v[h]) =
            *reinterpret_cast<const kf_vec<TIN, LV>*>(src + sample + (long long)(c + j) * spatial + s + h);
  }
#pragma unroll
  for (int k = 0; k < SV; ++k) {
    if (k >= here) break;
    kf_vec<TIN, CV> out;
#pragma unroll
    for (int j = 0; j < CV; ++j) out.v[j] = in[j].v[k];
    *reinterpret_cast<kf_vec<TIN, CV>*>(dst + sample + (long long)(s + k) * channels + c) = out;
  }
}

// kf_to_channels_last_c{written bytes}s{read bytes}: runs of channels written and of positions read as
// vectors of these bytes (the host launches these for 2- and 4-byte types only).
{% for c_bytes, s_bytes in square_shapes %}
extern "C" __global__ void __launch_bounds__(TRANSPOSE_THREADS) kf_to_channels_last_c{{ c_bytes }}s{{ s_bytes }}(
    const TIN* src, TIN* dst, int channels, int spatial) {
  transpose_squares<SQUARE_WIDE * {{ c_bytes }} / 16, SQUARE_WIDE * {{ s_bytes }} / 16>(src, dst, channels, spatial);
}
{% endfor %}