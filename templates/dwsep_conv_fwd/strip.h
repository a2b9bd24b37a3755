// A thread's STRIP output positions are adjacent along W: a filter row's inputs are the SPAN columns from the
// strip's first one, each read once and multiplied into every output of the strip that it reaches.
constexpr int STRIP = {{ strip }};
constexpr int SPAN = (STRIP - 1) * SW + (FX - 1) * DW + 1;
// The tap by which input column j of the span reaches strip output s, or -1 (known at compile time).
__device__ __forceinline__ constexpr int tap_of(int j, int s) {
  return j - s * SW >= 0 && (j - s * SW) % DW == 0 && (j - s * SW) / DW < FX ? (j - s * SW) / DW : -1;
}
__device__ __forceinline__ constexpr bool column_used(int j) {
  for (int s = 0; s < STRIP; ++s)
    if (tap_of(j, s) >= 0) return true;
  return false;
}
