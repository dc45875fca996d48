// Bad input gives an exception whose message names what was wrong.
#include <doctest/doctest.h>

#include "tests/support/check_error.hpp"
#include "xgrad/xgrad.hpp"

using namespace xgrad;

TEST_CASE("shape errors name the shapes")
{
    CHECK_ERROR(add(zeros({2, 3}), zeros({4})), std::invalid_argument, "[2, 3]", "[4]", "broadcast");
    CHECK_ERROR(where(zeros({2}), zeros({3}), zeros({3})), std::invalid_argument, "[2]", "[3]");
    CHECK_ERROR(matmul(zeros({2, 3}), zeros({4, 5})), std::invalid_argument, "[2, 3]", "[4, 5]", "inner");
    CHECK_ERROR(matmul(zeros({2, 2, 3}), zeros({3, 3, 5})), std::invalid_argument, "[2, 2, 3]", "[3, 3, 5]", "batch");
    CHECK_ERROR(matmul(zeros({3}), zeros({4})), std::invalid_argument, "[3]", "[4]");
    CHECK_ERROR(matmul(zeros({}), zeros({4})), std::invalid_argument, "[]");
    CHECK_ERROR(matmul_add(zeros({2, 3}), zeros({3, 5}), zeros({4})), std::invalid_argument, "matmul_add", "[4]",
                "[2, 5]");
    // An addend that would enlarge the product is refused, not broadcast over it.
    CHECK_ERROR(matmul_add(zeros({2, 3}), zeros({3, 5}), zeros({3, 2, 5})), std::invalid_argument, "[3, 2, 5]",
                "[2, 5]");
    CHECK_ERROR(matmul_add(zeros({3}), zeros({3, 5}), zeros({5})), std::invalid_argument, "two dimensions", "[3]");
    CHECK_ERROR(matmul_add(zeros({2, 3}), zeros({4, 5}), zeros({5})), std::invalid_argument, "[2, 3]", "[4, 5]",
                "inner");
    CHECK_ERROR(reshape(zeros({2, 3}), {4, 2}), std::invalid_argument, "[4, 2]", "[2, 3]");
    CHECK_ERROR(reshape(zeros({2, 3}), {-1, -1}), std::invalid_argument, "-1");
    CHECK_ERROR(reshape(zeros({2, 3}), {4, -1}), std::invalid_argument, "[4, -1]");
    CHECK_ERROR(permute(zeros({2, 3}), {0, 0}), std::invalid_argument, "repeated");
    CHECK_ERROR(permute(zeros({2, 3}), {0}), std::invalid_argument, "[2, 3]");
    CHECK_ERROR(transpose(zeros({2, 3}), 0, 2), std::invalid_argument, "dimension 2", "[2, 3]");
    CHECK_ERROR(slice(zeros({4}), 0, 0, 4, 0), std::invalid_argument, "step");
    CHECK_ERROR(expand(zeros({2, 3}), {4, 3}), std::invalid_argument, "[2, 3]", "[4, 3]");
    CHECK_ERROR(expand(zeros({2, 3}), {3}), std::invalid_argument, "fewer");
    CHECK_ERROR(concat({zeros({2, 3}), zeros({2, 4})}, 0), std::invalid_argument, "[2, 4]", "[2, 3]");
    CHECK_ERROR(concat({}, 0), std::invalid_argument, "no tensors");
    CHECK_ERROR(pad(zeros({2}), {{-1, 0}}), std::invalid_argument, "negative");
    CHECK_ERROR(pad(zeros({2}), {{1, 0}, {1, 1}}), std::invalid_argument, "[2]");
    CHECK_ERROR(sum(zeros({2, 3}), {2}), std::invalid_argument, "dimension 2", "[2, 3]");
    CHECK_ERROR(sum(zeros({2, 3}), {1, -1}), std::invalid_argument, "twice");
    CHECK_ERROR(max(zeros({2, 0}), {1}), std::invalid_argument, "extent 0");
    CHECK_ERROR(sum_to(zeros({2, 3}), {4}), std::invalid_argument, "[2, 3]", "[4]");
    CHECK_ERROR(slice_backward(zeros({3}), {5}, 0, 2, 2), std::invalid_argument, "overrun");
    CHECK_ERROR(zeros({2, -1}), std::invalid_argument, "negative");
    CHECK_ERROR(zeros({std::int64_t{1} << 61}, dtype::float64), std::invalid_argument, "bytes");
    CHECK_ERROR(zeros({std::int64_t{1} << 32, std::int64_t{1} << 32}), std::invalid_argument, "too many");
    CHECK_ERROR(expand(ones({1}), {-1}), std::invalid_argument, "negative", "[-1]");
    CHECK_ERROR(expand(ones({3}), {-5, 3}), std::invalid_argument, "negative");
    CHECK_ERROR(arange(0, 1e30), std::invalid_argument, "too many");
}

TEST_CASE("dtype errors name the dtypes")
{
    CHECK_ERROR(add(zeros({2}), zeros({2}, dtype::float64)), std::invalid_argument, "float32", "float64");
    CHECK_ERROR(matmul(zeros({2, 2}), zeros({2, 2}, dtype::float16)), std::invalid_argument, "float32", "float16");
    CHECK_ERROR(matmul_add(zeros({2, 2}), zeros({2, 2}), zeros({2}, dtype::float64)), std::invalid_argument, "float32",
                "float64");
    CHECK_ERROR(matmul_add(zeros({2, 2}), zeros({2, 2}), tensor{}), std::invalid_argument, "undefined");
    CHECK_ERROR(exp(zeros({2}, dtype::int64)), std::invalid_argument, "int64", "exp");
    CHECK_ERROR(sum(zeros({2}, dtype::int64)), std::invalid_argument, "int64");
    CHECK_ERROR(one_hot(zeros({2}), 3), std::invalid_argument, "int64", "float32");
    CHECK_ERROR(zeros({2}).grad().dtype(), std::invalid_argument, "undefined");
    tensor x = zeros({2});
    CHECK_ERROR(x.set_grad(zeros({2}, dtype::float64)), std::invalid_argument, "float64", "float32");
}

TEST_CASE("autograd misuse")
{
    const tensor x = zeros({3}, dtype::float64).requires_grad_();
    CHECK_ERROR(mul(x, x).backward(), std::runtime_error, "[3]", "grad_outputs");
    CHECK_ERROR(zeros({1}).backward(), std::runtime_error, "does not require grad");
    CHECK_ERROR(grad({sum(x)}, {zeros({1})}), std::runtime_error, "input 0 does not require grad");
    CHECK_ERROR(grad({mul(x, x)}, {x}, {zeros({2}, dtype::float64)}), std::invalid_argument, "[2]", "[3]");
    CHECK_ERROR(grad({mul(x, x)}, {x}, {zeros({3})}), std::invalid_argument, "float32", "float64");
    CHECK_ERROR(grad({sum(x)}, {x}, {zeros({}, dtype::float64), zeros({}, dtype::float64)}), std::invalid_argument,
                "2 grad_outputs", "1 outputs");
}

TEST_CASE("labels, losses and the gradient checker")
{
    const tensor logits = zeros({3, 4});
    CHECK_ERROR(cross_entropy(logits, zeros({2}, dtype::int64)), std::invalid_argument, "[2]", "[3, 4]");
    CHECK_ERROR(cross_entropy(zeros({3}), zeros({3}, dtype::int64)), std::invalid_argument, "[3]");
    CHECK_ERROR(cross_entropy(logits, full({3}, 4, dtype::int64)), std::invalid_argument, "label 4", "position 0",
                "[0, 4)");
    CHECK_ERROR(cross_entropy(logits, full({3}, -1, dtype::int64)), std::invalid_argument, "label -1");
    CHECK_ERROR(cross_entropy(logits, zeros({3}, dtype::int64), reduction::mean, 1.5), std::invalid_argument,
                "label_smoothing");
    CHECK_ERROR(one_hot(zeros({2, 2}, dtype::int64), 3), std::invalid_argument, "1-D", "[2, 2]");
    CHECK_ERROR(log_softmax(logits, 2), std::invalid_argument, "dimension 2");
    auto f = [](const std::vector<tensor>& a) { return std::vector<tensor>{a[0]}; };
    CHECK_ERROR(gradcheck(f, {zeros({2}).requires_grad_()}), std::invalid_argument, "float32", "float64");
    CHECK_ERROR(gradcheck(f, {zeros({2}, dtype::float64)}), std::invalid_argument, "no input requires grad");
    CHECK_ERROR(zeros({2}).item(), std::invalid_argument, "[2]");
    CHECK_ERROR(set_num_threads(0), std::invalid_argument, "0");
}
