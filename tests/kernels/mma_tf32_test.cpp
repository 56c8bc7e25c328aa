// The f32 attention pair's tensor-core arithmetic (src/kernels/cuda/mma_tf32.h, attention_tf32.cu),
// run on the host before it runs on a GPU: the very fragment loads and TF32 splits the kernels make,
// lane by lane, through an emulation of mma.sync.m16n8k8 .tf32 whose fragment tables are written out
// here from the PTX ISA (not taken from the header); every product the kernels form — S = Q Kᵀ, O +=
// P V with P's accumulators as the A fragment, dV += Wᵀ dO, dQ += dS' K from dS'ᵀ in shared memory —
// against a double-precision product; and the shared-memory banks of every load.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <set>
#include <vector>

#include "kernels/cuda/mma_tf32.h"

namespace {

namespace tf = qkv::kernels::cuda::tf32;

// The warp's registers of one fragment: [lane][element]
template <int N>
struct Fragment {
  float r[32][N];
  float (&operator[](int lane))[N] { return r[lane]; }
  const float (&operator[](int lane) const)[N] { return r[lane]; }
};
using A = Fragment<4>;
using B = Fragment<2>;
using C = Fragment<4>;

// What the tensor core reads of an operand register: TF32, the 13 low bits ignored
float tf32_bits(float x) {
  uint32_t u;
  std::memcpy(&u, &x, 4);
  u &= 0xffffe000u;
  std::memcpy(&x, &u, 4);
  return x;
}

// d = a·b + c over one warp, mma.m16n8k8.row.col.f32.tf32.tf32.f32; the PTX ISA's tables, g = lane / 4,
// t = lane % 4: a0 (g, t), a1 (g+8, t), a2 (g, t+4), a3 (g+8, t+4); b0 (t, g), b1 (t+4, g);
// c0 (g, 2t), c1 (g, 2t+1), c2 (g+8, 2t), c3 (g+8, 2t+1). Products of TF32 values are exact in f32.
void mma(C& c, const A& a, const B& b) {
  float Am[16][8], Bm[8][8], Cm[16][8];
  for (int lane = 0; lane < 32; ++lane) {
    const int g = lane / 4, t = lane % 4;
    Am[g][t] = a[lane][0], Am[g + 8][t] = a[lane][1], Am[g][t + 4] = a[lane][2], Am[g + 8][t + 4] = a[lane][3];
    Bm[t][g] = b[lane][0], Bm[t + 4][g] = b[lane][1];
    Cm[g][2 * t] = c[lane][0], Cm[g][2 * t + 1] = c[lane][1], Cm[g + 8][2 * t] = c[lane][2],
    Cm[g + 8][2 * t + 1] = c[lane][3];
  }
  for (int m = 0; m < 16; ++m)
    for (int n = 0; n < 8; ++n)
      for (int k = 0; k < 8; ++k) Cm[m][n] += tf32_bits(Am[m][k]) * tf32_bits(Bm[k][n]);
  for (int lane = 0; lane < 32; ++lane) {
    const int g = lane / 4, t = lane % 4;
    c[lane][0] = Cm[g][2 * t], c[lane][1] = Cm[g][2 * t + 1], c[lane][2] = Cm[g + 8][2 * t],
    c[lane][3] = Cm[g + 8][2 * t + 1];
  }
}

// c += a·b as the kernels do: split, three products, the small ones first; or one product of the
// rounded values (1xTF32), to show what the split buys.
void mma3(C& c, const A& a, const B& b, bool split = true) {
  A ab, as;
  B bb, bs;
  for (int l = 0; l < 32; ++l) tf::split(a[l], ab[l], as[l]), tf::split(b[l], bb[l], bs[l]);
  if (split) mma(c, as, bb), mma(c, ab, bs);
  mma(c, ab, bb);
}

// The C matrix a warp's accumulators hold (the PTX table, as in mma above)
std::vector<double> matrix_of(const C& c) {
  std::vector<double> m(16 * 8);
  for (int lane = 0; lane < 32; ++lane) {
    const int g = lane / 4, t = lane % 4;
    m[g * 8 + 2 * t] = c[lane][0], m[g * 8 + 2 * t + 1] = c[lane][1];
    m[(g + 8) * 8 + 2 * t] = c[lane][2], m[(g + 8) * 8 + 2 * t + 1] = c[lane][3];
  }
  return m;
}

std::vector<float> random_floats(size_t n, uint32_t seed, float scale = 1.f) {
  std::mt19937 gen(seed);
  std::normal_distribution<float> d(0.f, scale);
  std::vector<float> x(n);
  for (float& e : x) e = d(gen);
  return x;
}

// max |got − want| / max |want|
double rel_error(const std::vector<double>& got, const std::vector<double>& want) {
  double num = 0, den = 1e-30;
  for (size_t i = 0; i < want.size(); ++i) num = std::max(num, std::fabs(got[i] - want[i])), den = std::max(den, std::fabs(want[i]));
  return num / den;
}

constexpr int D = 64, S = tf::row_stride(D);

TEST(MmaTf32, TheHeadersFragmentsAreThePtxTables) {
  std::set<std::pair<int, int>> a, b, c;
  for (int lane = 0; lane < 32; ++lane) {
    const int g = lane / 4, t = lane % 4;
    const int ar[4][2] = {{g, t}, {g + 8, t}, {g, t + 4}, {g + 8, t + 4}};
    const int cr[4][2] = {{g, 2 * t}, {g, 2 * t + 1}, {g + 8, 2 * t}, {g + 8, 2 * t + 1}};
    for (int e = 0; e < 4; ++e) {
      EXPECT_EQ(tf::a_row(lane, e), ar[e][0]) << lane << " " << e;
      EXPECT_EQ(tf::a_col(lane, e), ar[e][1]) << lane << " " << e;
      EXPECT_EQ(tf::c_row(lane, e), cr[e][0]) << lane << " " << e;
      EXPECT_EQ(tf::c_col(lane, e), cr[e][1]) << lane << " " << e;
      a.insert({tf::a_row(lane, e), tf::a_col(lane, e)}), c.insert({tf::c_row(lane, e), tf::c_col(lane, e)});
    }
    for (int e = 0; e < 2; ++e) {
      EXPECT_EQ(tf::b_row(lane, e), t + 4 * e);
      EXPECT_EQ(tf::b_col(lane, e), g);
      b.insert({tf::b_row(lane, e), tf::b_col(lane, e)});
    }
  }
  EXPECT_EQ(a.size(), 128u) << "every element of A once";
  EXPECT_EQ(b.size(), 64u);
  EXPECT_EQ(c.size(), 128u);
  std::set<int> perm;
  for (int k = 0; k < 8; ++k) perm.insert(tf::kperm(k));
  EXPECT_EQ(perm.size(), 8u) << "kperm is a permutation of 0…7";
}

TEST(MmaTf32, RoundingIsToNearestTiesAwayAndTheSplitIsExact) {
  EXPECT_EQ(tf::round_tf32(1.f), 1.f);
  const float ulp = std::ldexp(1.f, -10);  // TF32's ulp at 1
  EXPECT_EQ(tf::round_tf32(1.f + 0.5f * ulp), 1.f + ulp) << "a tie rounds away from zero";
  EXPECT_EQ(tf::round_tf32(-1.f - 0.5f * ulp), -1.f - ulp);
  EXPECT_EQ(tf::round_tf32(1.f + 0.49f * ulp), 1.f);
  EXPECT_TRUE(std::isinf(tf::round_tf32(INFINITY)));
  EXPECT_TRUE(std::isnan(tf::round_tf32(NAN)));
  for (float x : random_floats(10000, 1, 3.f)) {
    float v[1] = {x}, big[1], small[1];
    tf::split(v, big, small);
    ASSERT_EQ(tf32_bits(big[0]), big[0]) << x;
    ASSERT_EQ(tf32_bits(small[0]), small[0]) << x;
    ASSERT_LE(std::fabs(x - big[0] - small[0]), std::ldexp(std::fabs(x), -21)) << x;
  }
}

// S = Q_w Kᵀ for 16 query rows and 8 keys over D dims: the forward's (and the backward's Sᵀ = K_w Q_iᵀ)
// loads, to f32's accuracy with the split and TF32's without
TEST(MmaTf32, QueryRowsTimesKeysLikeTheForward) {
  const std::vector<float> Qs = random_floats(16 * S, 2), Ks = random_floats(8 * S, 3);
  C c{}, c1{};
  for (int kk = 0; kk < D / 8; ++kk) {
    A a;
    B b;
    for (int lane = 0; lane < 32; ++lane) {
      tf::load_a<false>(a[lane], Qs.data() + kk * 8, S, 1, lane);
      tf::load_b<false>(b[lane], Ks.data() + kk * 8, 1, S, lane);
    }
    mma3(c, a, b), mma3(c1, a, b, false);
  }
  std::vector<double> want(16 * 8, 0.);
  for (int m = 0; m < 16; ++m)
    for (int n = 0; n < 8; ++n)
      for (int d = 0; d < D; ++d) want[m * 8 + n] += double{Qs[m * S + d]} * Ks[n * S + d];
  EXPECT_LT(rel_error(matrix_of(c), want), 2e-6);
  EXPECT_GT(rel_error(matrix_of(c1), want), 1e-4) << "one TF32 product loses f32's accuracy";
}

// O += P V: P's accumulators (16 rows × 8 keys) as the A fragment, V's rows read in kperm order —
// the forward's second product, and the backward's dV += Wᵀ dO and dK += dS'ᵀ Q (keys as the rows)
TEST(MmaTf32, AccumulatorsAsTheNextAFragmentWithTheRowsInKpermOrder) {
  const std::vector<float> Vs = random_floats(8 * S, 4), Pv = random_floats(16 * 8, 5);
  C p;  // the accumulators of a 16 × 8 product, as the lanes hold them
  for (int lane = 0; lane < 32; ++lane)
    for (int e = 0; e < 4; ++e) p[lane][e] = Pv[tf::c_row(lane, e) * 8 + tf::c_col(lane, e)];
  const std::vector<double> P = matrix_of(p);
  for (int dt = 0; dt < D / 8; ++dt) {
    A a;
    B b;
    for (int lane = 0; lane < 32; ++lane) {
      tf::accumulators_as_a(a[lane], p[lane]);
      tf::load_b<true>(b[lane], Vs.data() + dt * 8, S, 1, lane);
    }
    C o{};
    mma3(o, a, b);
    std::vector<double> want(16 * 8, 0.);
    for (int m = 0; m < 16; ++m)
      for (int n = 0; n < 8; ++n)
        for (int k = 0; k < 8; ++k) want[m * 8 + n] += P[m * 8 + k] * Vs[k * S + dt * 8 + n];
    EXPECT_LT(rel_error(matrix_of(o), want), 2e-6) << "dims " << dt * 8;
  }
}

// dQ_i += dS' K_j: dS' stored transposed ([key][row], stride kDsStride) and read as A with its keys in
// kperm order, K's rows in the same order
TEST(MmaTf32, TransposedScoresTimesKeysLikeTheBackwardsDq) {
  constexpr int keys = 64, rows = 64, SS = tf::kDsStride;
  const std::vector<float> dSt = random_floats(keys * SS, 6), Ks = random_floats(keys * S, 7);
  for (int rw : {0, 16, 48}) {
    for (int dt : {0, 3, 7}) {
      C acc{};
      for (int kk = 0; kk < keys / 8; ++kk) {
        A a;
        B b;
        for (int lane = 0; lane < 32; ++lane) {
          tf::load_a<true>(a[lane], dSt.data() + kk * 8 * SS + rw, 1, SS, lane);
          tf::load_b<true>(b[lane], Ks.data() + kk * 8 * S + dt * 8, S, 1, lane);
        }
        mma3(acc, a, b);
      }
      std::vector<double> want(16 * 8, 0.);
      for (int m = 0; m < 16; ++m)
        for (int n = 0; n < 8; ++n)
          for (int j = 0; j < keys; ++j) want[m * 8 + n] += double{dSt[j * SS + rw + m]} * Ks[j * S + dt * 8 + n];
      EXPECT_LT(rel_error(matrix_of(acc), want), 2e-6) << "rows " << rw << ", dims " << dt * 8;
    }
  }
  static_assert(rows <= SS);
}

// Every shared-memory load the kernels make reads 32 different banks (one 4-byte word a lane), for
// each element of the fragment — S = Q Kᵀ's A and B, the kperm-ordered B of V, dO, Q and K, dS'ᵀ's A
TEST(MmaTf32, EveryFragmentLoadIsFreeOfBankConflicts) {
  for (int d : {64, 128}) {
    const int s = tf::row_stride(d);
    struct Load {
      const char* what;
      int (*offset)(int lane, int e, int s);
      int elements;
    };
    const Load loads[] = {
        {"A of rows (Q, K_w, V_w)", [](int l, int e, int s) { return tf::a_row(l, e) * s + tf::a_col(l, e); }, 4},
        {"B of rows (Kᵀ, Qᵀ, dOᵀ)", [](int l, int e, int s) { return tf::b_row(l, e) + tf::b_col(l, e) * s; }, 2},
        {"B in kperm order (V, dO, Q, K)",
         [](int l, int e, int s) { return tf::kperm(tf::b_row(l, e)) * s + tf::b_col(l, e); }, 2},
        {"A of dS'ᵀ in kperm order",
         [](int l, int e, int) { return tf::a_row(l, e) + tf::kperm(tf::a_col(l, e)) * tf::kDsStride; }, 4},
        {"A of dS'ᵀ in kperm order, steps of 32 rows (head dim 128's)",
         [](int l, int e, int) { return tf::a_row(l, e) + tf::kperm(tf::a_col(l, e)) * tf::ds_stride(32); }, 4},
    };
    for (const Load& ld : loads) {
      for (int e = 0; e < ld.elements; ++e) {
        std::set<int> banks;
        for (int lane = 0; lane < 32; ++lane) banks.insert(ld.offset(lane, e, s) % 32);
        EXPECT_EQ(banks.size(), 32u) << ld.what << ", D " << d << ", element " << e;
      }
    }
  }
}

}  // namespace
