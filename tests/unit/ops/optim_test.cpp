// The optimizer arithmetic of attn/ops/optim.h: adam_update gives the kernel's bits for float
// and double (its adam_step_scalars formed from the same settings), add_into equals a plain
// loop of additions bit for bit, and add_into refuses tensors it cannot sum (each refusal next
// to a control that passes).
#include "attn/ops/optim.h"

#include <gtest/gtest.h>

#include <cstring>
#include <vector>

#include "attn/core/error.h"
#include "attn/core/rng.h"
#include "attn/ops/ops.h"
#include "kernels/adam.h"

namespace attn {
namespace {

template <class T>
std::vector<T> random_values(int64_t n, uint64_t seed, double scale = 1.0, bool positive = false) {
  Rng rng(seed);
  std::vector<T> out;
  for (int64_t i = 0; i < n; ++i) out.push_back(static_cast<T>(scale * (positive ? rng.uniform() : rng.normal())));
  return out;
}

template <class T>
bool same_bits(const std::vector<T>& a, const std::vector<T>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(T)) == 0;
}

template <class T>
void expect_adam_matches_kernel(bool decoupled) {
  // Over the threaded size, with an odd tail.
  const int64_t n = (1 << 17) + 37;
  AdamUpdate u;
  u.lr = 3e-3;
  u.step = 7;
  u.weight_decay = 0.01;
  u.decoupled_weight_decay = decoupled;
  std::vector<T> p = random_values<T>(n, 1), m = random_values<T>(n, 2, 0.1),
                 v = random_values<T>(n, 3, 0.01, true);
  const std::vector<T> g = random_values<T>(n, 4);
  std::vector<T> kp = p, km = m, kv = v;
  adam_update(p.data(), m.data(), v.data(), g.data(), n, u);
  kernels::adam_update<T>(kp.data(), km.data(), kv.data(), g.data(), n,
                          kernels::adam_step_scalars<T>(u.lr, u.step, u.beta1, u.beta2, u.eps, u.weight_decay,
                                                        u.decoupled_weight_decay));
  EXPECT_TRUE(same_bits(p, kp));
  EXPECT_TRUE(same_bits(m, km));
  EXPECT_TRUE(same_bits(v, kv));
  EXPECT_FALSE(same_bits(p, random_values<T>(n, 1)));  // control: the update changed p
}

TEST(OptimOps, AdamUpdateIsTheKernelsFloat) {
  expect_adam_matches_kernel<float>(true);
  expect_adam_matches_kernel<float>(false);
}

TEST(OptimOps, AdamUpdateIsTheKernelsDouble) {
  expect_adam_matches_kernel<double>(true);
  expect_adam_matches_kernel<double>(false);
}

template <class T>
void expect_add_into_is_a_loop(DType dtype) {
  const int64_t n = 1031;
  const std::vector<T> a = random_values<T>(n, 5), b = random_values<T>(n, 6);
  const Tensor dst = Tensor::from_vector<T>(a, Shape{n});
  const Tensor src = Tensor::from_vector<T>(b, Shape{n});
  ASSERT_EQ(dst.dtype(), dtype);
  add_into(dst, src);
  std::vector<T> expected = a;
  for (int64_t i = 0; i < n; ++i) expected[static_cast<size_t>(i)] += b[static_cast<size_t>(i)];
  EXPECT_TRUE(same_bits(dst.to_vector<T>(), expected));
  EXPECT_TRUE(same_bits(src.to_vector<T>(), b));  // src is read only
}

TEST(OptimOps, AddIntoIsALoopOfAdditions) {
  expect_add_into_is_a_loop<float>(DType::F32);
  expect_add_into_is_a_loop<double>(DType::F64);
}

TEST(OptimOps, AddIntoRefusesTensorsItCannotSum) {
  const Tensor a = Tensor::zeros(Shape{2, 3}, DType::F32);
  EXPECT_NO_THROW(add_into(a, Tensor::zeros(Shape{2, 3}, DType::F32)));  // control
  EXPECT_THROW(add_into(a, Tensor::zeros(Shape{2, 3}, DType::F64)), Error);
  EXPECT_THROW(add_into(a, Tensor::zeros(Shape{3, 2}, DType::F32)), Error);
  EXPECT_THROW(add_into(a, transpose(Tensor::zeros(Shape{3, 2}, DType::F32), 0, 1)), Error);
  EXPECT_THROW(add_into(Tensor::zeros(Shape{2, 3}, DType::I64), Tensor::zeros(Shape{2, 3}, DType::I64)), Error);
  EXPECT_THROW(add_into(a, Tensor()), Error);
}

}  // namespace
}  // namespace attn
