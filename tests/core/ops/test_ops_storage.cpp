// The ops that name storage (xgrad/ops/storage.hpp) and the optimizer steps (xgrad/ops/optim.hpp):
// what they write, which views they accept, and the errors for the ones they refuse (each
// refused before anything is written). identity's gradients are checked by finite differences
// with every other op (tests/support/gradcheck_cases.hpp); the steps' values against the
// optimizers' composite rules in tests/train/optim/test_optim_fused.cpp.
#include <doctest/doctest.h>

#include <cmath>
#include <cstdint>
#include <vector>

#include "tests/support/check_error.hpp"
#include "xgrad/xgrad.hpp"

using namespace xgrad;

namespace
{
    tensor f32(const std::vector<double>& v, const shape_type& shape)
    {
        return from_host(v.data(), shape, dtype::float64).to(dtype::float32);
    }
}

TEST_CASE("identity: a recorded view whose gradient reaches x unchanged")
{
    const tensor x = f32({1, 2, 3, 4}, {2, 2}).requires_grad_();
    const tensor y = identity(x);
    CHECK(y.data_ptr() == x.data_ptr());
    REQUIRE(y.grad_fn());
    CHECK(y.grad_fn()->name() == "identity");
    // The gradient through this use of x alone, apart from x's other uses.
    const tensor f = sum(y * x);
    const auto g = grad({f}, {y});
    CHECK(to_vector(g[0]) == std::vector<double>{1, 2, 3, 4});
    CHECK_ERROR(identity(tensor()), std::invalid_argument, "identity");
}

TEST_CASE("as_strided: views inside the storage, refused outside it")
{
    const tensor flat = f32({0, 1, 2, 3, 4, 5, 6, 7}, {8});
    const tensor v = as_strided(flat, {2, 3}, {3, 1}, 2);
    CHECK(to_vector(v) == std::vector<double>{2, 3, 4, 5, 6, 7});
    CHECK_FALSE(v.requires_grad());
    CHECK(to_vector(as_strided(flat, {3}, {0}, 7)) == std::vector<double>{7, 7, 7}); // a broadcast read
    CHECK(as_strided(flat, {0, 5}, {100, 100}, 1000).numel() == 0);                  // addresses nothing
    // One element past the end, a negative stride or offset, mismatched lengths, overflow.
    CHECK_ERROR(as_strided(flat, {2, 3}, {3, 1}, 3), xgrad::invalid_argument, "as_strided", "reach element 8",
                "storage of 8 float32 elements");
    CHECK_ERROR(as_strided(flat, {2}, {-1}, 4), xgrad::invalid_argument, "must not be negative");
    CHECK_ERROR(as_strided(flat, {2}, {1}, -1), xgrad::invalid_argument, "offset -1");
    CHECK_ERROR(as_strided(flat, {2, 2}, {1}, 0), xgrad::invalid_argument, "different lengths");
    CHECK_ERROR(as_strided(flat, {3, 2}, {INT64_MAX, 1}, 0), xgrad::invalid_argument, "as_strided", "overflows");
}

TEST_CASE("clone: new storage, the same values, not recorded")
{
    const tensor x = f32({1, 2, 3, 4, 5, 6}, {2, 3}).requires_grad_();
    const tensor c = clone(transpose(x, 0, 1));
    CHECK(c.is_contiguous());
    CHECK(c.data_ptr() != x.data_ptr());
    CHECK(to_vector(c) == std::vector<double>{1, 4, 2, 5, 3, 6});
    CHECK_FALSE(c.grad_fn());
}

TEST_CASE("copy_: into dst's own storage through its strides, converting the dtype")
{
    const tensor buffer = zeros({6}, dtype::float64);
    const tensor view = as_strided(buffer, {2, 2}, {1, 3}, 1); // elements 1, 4 / 2, 5
    copy_(view, f32({10, 20, 30, 40}, {2, 2}));
    CHECK(to_vector(buffer) == std::vector<double>{0, 10, 30, 0, 20, 40});
    // In place onto itself is allowed (the identical view); disjoint parts of one storage too.
    copy_(view, view);
    copy_(as_strided(buffer, {2}, {1}, 0), as_strided(buffer, {2}, {1}, 4));
    CHECK(to_vector(buffer) == std::vector<double>{20, 40, 30, 0, 20, 40});

    CHECK_ERROR(copy_(buffer, zeros({5}, dtype::float64)), xgrad::invalid_argument, "copy_", "[6]", "[5]");
    CHECK_ERROR(copy_(tensor(), buffer), std::invalid_argument, "copy_");
    // A broadcast dst would have several writes land on one element; an overlap in one storage
    // would make the result depend on the order of the writes.
    CHECK_ERROR(copy_(as_strided(buffer, {3}, {0}, 0), zeros({3}, dtype::float64)), xgrad::invalid_argument,
                "share an address");
    CHECK_ERROR(copy_(as_strided(buffer, {2, 2}, {1, 1}, 0), zeros({2, 2}, dtype::float64)), xgrad::invalid_argument,
                "share an address");
    CHECK_ERROR(copy_(as_strided(buffer, {3}, {1}, 0), as_strided(buffer, {3}, {1}, 1)), xgrad::invalid_argument,
                "overlaps src");
    CHECK(to_vector(buffer) == std::vector<double>{20, 40, 30, 0, 20, 40}); // nothing written by a refusal
}

TEST_CASE("sgd_step, adam_step: in place or into new storage, the same values; refused operands")
{
    const tensor p = f32({1, -2, 3, 0.5}, {4}), g = f32({0.5, 0.25, -1, 2}, {4});
    sgd_step_params sp;
    sp.lr = 0.1;
    sp.momentum = 0.9;
    // Into new storage, then in place from copies of the same inputs: the same values.
    const tensor out = empty({4}), buf = empty({4});
    sgd_step(out, buf, p, g, tensor(), sp);
    const tensor q = clone(p), b0 = clone(buf);
    sgd_step(q, b0, q, g, tensor(), sp); // the first step's buffer output in b0, read by nothing
    CHECK(to_vector(q) == to_vector(out));
    CHECK(to_vector(buf) == to_vector(g)); // b = d on the first step
    const tensor b1 = clone(buf);
    sgd_step(q, b1, q, g, b1, sp); // the second step, buffer in place
    CHECK(to_vector(b1)[0] == doctest::Approx(0.5 * 0.9 + 0.5));

    // Momentum 0 keeps no buffer; an operand that is not param's shape, dtype or device, or
    // not contiguous, or an output sharing storage with another operand, is refused.
    sgd_step_params plain;
    plain.lr = 0.1;
    CHECK_ERROR(sgd_step(out, buf, p, g, tensor(), plain), xgrad::invalid_argument, "sgd_step", "keeps no buffer");
    CHECK_ERROR(sgd_step(out, tensor(), p, g, tensor(), sp), xgrad::invalid_argument, "momentum_out is needed");
    CHECK_ERROR(sgd_step(out, tensor(), p, zeros({3}), tensor(), plain), xgrad::invalid_argument, "grad is [3]");
    CHECK_ERROR(sgd_step(out, tensor(), p, zeros({4}, dtype::float64), tensor(), plain), xgrad::invalid_argument,
                "grad", "float64");
    const tensor strided = as_strided(zeros({8}), {4}, {2}, 0);
    CHECK_ERROR(sgd_step(strided, tensor(), p, g, tensor(), plain), xgrad::invalid_argument, "param_out", "contiguous");
    CHECK_ERROR(sgd_step(g, tensor(), p, g, tensor(), plain), xgrad::invalid_argument, "param_out",
                "shares storage with grad");
    CHECK_ERROR(sgd_step(out, tensor(), zeros({4}, dtype::int64), g, tensor(), plain), xgrad::invalid_argument,
                "floating point");

    adam_step_params ap;
    ap.lr = 0.01;
    ap.bias_correction1 = 1 - 0.9;
    ap.bias_correction2 = 1 - 0.999;
    const tensor m = empty({4}), v = empty({4}), p1 = empty({4});
    adam_step(p1, m, v, p, g, tensor(), tensor(), ap);
    const std::vector<double> pv = to_vector(p), p1v = to_vector(p1);
    for (std::size_t i = 0; i < pv.size(); ++i) // the first step moves each element by about lr
        CHECK(std::abs(pv[i] - p1v[i]) == doctest::Approx(0.01).epsilon(1e-3));
    CHECK_ERROR(adam_step(p1, m, v, p, g, m, tensor(), ap), xgrad::invalid_argument, "adam_step", "both");
    CHECK_ERROR(adam_step(p1, m, m, p, g, tensor(), tensor(), ap), xgrad::invalid_argument, "exp_avg_out",
                "exp_avg_sq_out", "share storage");
}
