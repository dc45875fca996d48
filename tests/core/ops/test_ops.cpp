// Forward values of every op, checked against xtensor computing the same expression in
// float64, for float64 and float32 (and 16-bit where the rounding rule is the point); every op
// code's op against its formula (backends/common/op_math.hpp), driven by the op table
// (tests/support/op_cases.hpp); argmax against a direct loop.
#include <doctest/doctest.h>

#include <cmath>

#include <xtensor/xio.hpp>
#include <xtensor/xmath.hpp>
#include <xtensor/xsort.hpp>
#include <xtensor/xview.hpp>

#include "backends/common/op_math.hpp"
#include "tests/support/op_cases.hpp"
#include "xgrad/xgrad.hpp"

using namespace xgrad;

namespace
{
    xt::xarray<double> rnd(const std::vector<std::size_t>& shape, std::uint64_t seed, double shift = 0.0)
    {
        generator g(seed);
        shape_type s(shape.begin(), shape.end());
        return to_xarray<double>(randn(s, g, dtype::float64)) + shift;
    }

    /// a [P, M, K] @ b [K, N] by the definition, in float64.
    xt::xarray<double> batched_product(const xt::xarray<double>& a, const xt::xarray<double>& b)
    {
        xt::xarray<double> out = xt::zeros<double>({a.shape()[0], a.shape()[1], b.shape()[1]});
        for (std::size_t p = 0; p < a.shape()[0]; ++p)
            for (std::size_t i = 0; i < a.shape()[1]; ++i)
                for (std::size_t j = 0; j < b.shape()[1]; ++j)
                    for (std::size_t k = 0; k < a.shape()[2]; ++k)
                        out(p, i, j) += a(p, i, k) * b(k, j);
        return out;
    }

    /// float64 results must match xtensor to a few ulp (different but equally exact libm
    /// paths); float32 results to float32 rounding of O(1) values, relative 1e-5 (a few ulp of
    /// 2^-23 ~ 1.2e-7, with headroom for the SIMD transcendental approximations, which are
    /// within 4 ulp).
    void check_close(const tensor& got, const xt::xarray<double>& want)
    {
        REQUIRE(got.shape() == shape_type(want.shape().begin(), want.shape().end()));
        const double rtol = got.dtype() == dtype::float64 ? 1e-13 : 1e-5;
        const auto g = to_xarray<double>(got);
        for (std::size_t i = 0; i < want.size(); ++i)
        {
            const double w = want.flat(i), v = g.flat(i);
            if (std::isnan(w))
                CHECK(std::isnan(v));
            else
                CHECK(std::abs(v - w) <= rtol * std::max(1.0, std::abs(w)));
        }
    }
}

TEST_CASE("elementwise ops match xtensor")
{
    const xt::xarray<double> a = rnd({3, 4}, 1), b = rnd({4}, 2), p = xt::abs(rnd({3, 4}, 3)) + 0.5;
    for (dtype dt : {dtype::float64, dtype::float32})
    {
        INFO(name(dt));
        const tensor ta = from_xarray(a).to(dt), tb = from_xarray(b).to(dt), tp = from_xarray(p).to(dt);
        check_close(add(ta, tb), a + b);
        check_close(sub(ta, tb), a - b);
        check_close(mul(ta, tb), a * b);
        check_close(div(ta, tp), a / p);
        check_close(pow(tp, ta), xt::pow(p, a));
        check_close(pow(tp, 3.0), xt::pow(p, 3.0));
        check_close(neg(ta), -a);
        check_close(exp(ta), xt::exp(a));
        check_close(log(tp), xt::log(p));
        check_close(sqrt(tp), xt::sqrt(p));
        check_close(rsqrt(tp), 1.0 / xt::sqrt(p));
        check_close(square(ta), a * a);
        check_close(abs(ta), xt::abs(a));
        check_close(sign(ta), xt::sign(a));
        check_close(relu(ta), xt::maximum(a, 0.0));
        check_close(sigmoid(ta), 1.0 / (1.0 + xt::exp(-a)));
        check_close(tanh(ta), xt::tanh(a));
        check_close(log1p(tp), xt::log1p(p));
        check_close(expm1(ta), xt::expm1(a));
        check_close(erf(ta), xt::erf(a));
        check_close(gt(ta, tb), xt::cast<double>(a > b));
        check_close(le(ta, tb), xt::cast<double>(a <= b));
        check_close(eq(ta, ta), xt::ones<double>({3, 4}));
        check_close(ne(ta, tb), xt::cast<double>(xt::not_equal(a, b)));
        check_close(lt(ta, tb), xt::cast<double>(a < b));
        check_close(ge(ta, tb), xt::cast<double>(a >= b));
        check_close(where(gt(ta, tb), ta, tb), xt::where(a > b, a, b));
        check_close(ta * 2.0 + 1.0, a * 2.0 + 1.0);
        check_close(1.0 / tp - 3.0, 1.0 / p - 3.0);
    }
}

TEST_CASE("sigmoid and exp at the extremes")
{
    const tensor x = from_host(std::vector<double>{-1000, -50, 0, 50, 1000}.data(), {5}, dtype::float64);
    for (dtype dt : {dtype::float64, dtype::float32})
    {
        const auto s = to_vector(sigmoid(x.to(dt)));
        CHECK(s[0] == 0.0);
        CHECK(s[2] == 0.5);
        CHECK(s[4] == 1.0);
        for (double v : s)
            CHECK(std::isfinite(v));
    }
    CHECK(std::isinf(to_vector(exp(x))[4]));
}

TEST_CASE("16-bit dtypes compute in float32 and round the result once")
{
    // 1 + 2^-11 is not a float16, but 1 + 2^-10 is; adding 2^-11 + 2^-12 to 1 in float32 then
    // rounding gives 1 + 2^-10, while two float16 additions would give 1.
    const tensor one = full({1}, 1.0, dtype::float16);
    const tensor small = full({1}, 0x1.8p-11, dtype::float16);
    CHECK(add(one, small).item() == 1.0 + 0x1p-10);
    CHECK(add(one, small).dtype() == dtype::float16);
    const tensor b = full({3}, 3.0, dtype::bfloat16);
    CHECK(to_vector(mul(b, b)) == std::vector<double>{9, 9, 9});
    CHECK(sum(full({1000}, 1.0, dtype::bfloat16)).item() == 1000.0); // float32 accumulation
}

TEST_CASE("reductions match xtensor")
{
    const auto a = rnd({2, 3, 4}, 5);
    for (dtype dt : {dtype::float64, dtype::float32})
    {
        INFO(name(dt));
        const tensor t = from_xarray(a).to(dt);
        check_close(sum(t), xt::xarray<double>(xt::sum(a)));
        check_close(sum(t, {1}), xt::sum(a, {1}));
        check_close(sum(t, {0, 2}), xt::sum(a, {0, 2}));
        check_close(sum(t, {-1}, true), xt::sum(a, {2}, xt::keep_dims));
        check_close(mean(t, {0}), xt::mean(a, {0}));
        check_close(max(t, {2}), xt::amax(a, {2}));
        check_close(max(t, {0, 1}, true), xt::amax(a, {0, 1}, xt::keep_dims));
        check_close(max(t), xt::xarray<double>(xt::amax(a)));
        check_close(sum(t.permute({2, 0, 1}), {1}), xt::sum(xt::transpose(a, {2, 0, 1}), {1}));
        const xt::xarray<double> s31 = xt::reshape_view(xt::sum(a, {0, 2}), {3, 1});
        check_close(sum_to(t, {3, 1}), s31);
    }
    CHECK(sum(zeros({0, 3}), {0}).shape() == shape_type{3});
    CHECK(to_vector(sum(zeros({0, 3}), {0})) == std::vector<double>{0, 0, 0});
}

TEST_CASE("max shares the gradient among ties, and gives it to a NaN maximum")
{
    const tensor x = from_host(std::vector<double>{1, 3, 3, 2}.data(), {4}, dtype::float64).requires_grad_();
    max(x).backward();
    CHECK(to_vector(x.grad()) == std::vector<double>{0, 0.5, 0.5, 0});
    const tensor n = from_host(std::vector<double>{1, NAN, 2}.data(), {3}, dtype::float64).requires_grad_();
    max(n).backward();
    CHECK(to_vector(n.grad()) == std::vector<double>{0, 1, 0});
}

TEST_CASE("pow gradients at zero take the limits, not 0 * inf")
{
    const tensor zero = full({}, 0.0, dtype::float64);
    const tensor a = zero.detach().requires_grad_();
    const auto da = grad({pow(a, zero)}, {a})[0]; // d(a^0)/da = 0, even at a = 0
    CHECK(da.item() == 0.0);
    const tensor b = full({}, 2.0, dtype::float64).requires_grad_();
    const auto db = grad({pow(zero, b)}, {b})[0]; // 0^b is constant for b > 0
    CHECK(db.item() == 0.0);
    const tensor c = full({}, 3.0, dtype::float64).requires_grad_();
    CHECK(grad({pow(c, 2.0)}, {c})[0].item() == 6.0);
}

TEST_CASE("matmul matches xtensor for all shapes and layouts")
{
    const auto a = rnd({2, 3, 4}, 6), b = rnd({4, 5}, 7), v = rnd({4}, 8);
    for (dtype dt : {dtype::float64, dtype::float32})
    {
        INFO(name(dt));
        const tensor ta = from_xarray(a).to(dt), tb = from_xarray(b).to(dt), tv = from_xarray(v).to(dt);
        const xt::xarray<double> want = batched_product(a, b);
        check_close(matmul(ta, tb), want);
        // The same product from transposed (column-major) views.
        check_close(
            matmul(ta.transpose(1, 2).contiguous().transpose(1, 2), tb.transpose(0, 1).contiguous().transpose(0, 1)),
            want);
        // Vector operands.
        xt::xarray<double> bv = xt::zeros<double>({5});
        for (std::size_t j = 0; j < 5; ++j)
            for (std::size_t k = 0; k < 4; ++k)
                bv(j) += v(k) * b(k, j);
        check_close(matmul(tv, tb), bv);
        check_close(matmul(tv, tv), xt::xarray<double>(xt::sum(v * v)));
        check_close(matmul(tb.transpose(0, 1), tv), bv);
        // Batch broadcasting [2,1,3,4] @ [3,4,5] -> [2,3,3,5]
        const tensor tc = ta.slice(0, 0, 1).reshape({1, 3, 4}).expand({2, 1, 3, 4});
        CHECK(matmul(tc, from_xarray(rnd({3, 4, 5}, 9)).to(dt)).shape() == shape_type{2, 3, 3, 5});
        // k = 0 gives zeros.
        CHECK(to_vector(matmul(zeros({2, 0}, dt), zeros({0, 3}, dt))) == std::vector<double>(6, 0.0));
    }
}

TEST_CASE("matmul gives a transposed-view operand its gradient in the operand's own layout")
{
    // nn::linear multiplies by weight.t(): the weight's gradient must come out contiguous (the
    // GEMM writes it in place of a copy through the transpose) and equal the plain product's.
    for (dtype dt : {dtype::float64, dtype::float32})
    {
        INFO(name(dt));
        const tensor x = from_xarray(rnd({5, 4}, 21)).to(dt).requires_grad_();
        const tensor w = from_xarray(rnd({3, 4}, 22)).to(dt).requires_grad_();
        const tensor g = from_xarray(rnd({5, 3}, 23)).to(dt);
        const auto grads = grad({matmul(x, transpose(w, 0, 1))}, {x, w}, {g});
        CHECK(grads[1].is_contiguous());
        // dW = g^T x and dx = g w, from the same values as plain (contiguous) operands.
        check_close(grads[1], to_xarray<double>(matmul(transpose(g, 0, 1).contiguous(), x.detach())));
        check_close(grads[0], to_xarray<double>(matmul(g, w.detach())));
        // And a transposed left operand: the leaf behind the transpose gets a contiguous gradient too.
        const tensor at = from_xarray(rnd({4, 5}, 24)).to(dt).requires_grad_();
        const auto ga = grad({matmul(transpose(at, 0, 1), w.detach().transpose(0, 1))}, {at}, {g})[0];
        CHECK(ga.is_contiguous());
        check_close(
            ga, to_xarray<double>(matmul(w.detach().transpose(0, 1).contiguous(), transpose(g, 0, 1).contiguous())));
    }
}

TEST_CASE("matmul_add is matmul plus the broadcast addend, added once, for every dtype")
{
    // The addend is added to each whole dot product (GEMM's beta = 1): against the float64
    // product plus c, float64 and float32 stay within check_close's bounds (c is O(1), like the
    // product); 16-bit results are computed in float32 and rounded once, so they are within the
    // 16-bit unit roundoff (relative 2^-8 for bfloat16's 7 fraction bits, 2^-11 for float16's
    // 10) of the float32 result, plus that result's own 1e-5.
    const auto a = rnd({2, 3, 4}, 16), b = rnd({4, 5}, 17);
    const auto row = rnd({5}, 18), col = rnd({3, 1}, 19), full = rnd({2, 3, 5}, 20);
    const xt::xarray<double> prod = batched_product(a, b);
    for (dtype dt : {dtype::float64, dtype::float32})
    {
        INFO(name(dt));
        const tensor ta = from_xarray(a).to(dt), tb = from_xarray(b).to(dt);
        check_close(matmul_add(ta, tb, from_xarray(row).to(dt)), prod + row);
        check_close(matmul_add(ta, tb, from_xarray(col).to(dt)), prod + col);
        // A full-shape contiguous addend is copied, never written: it keeps its values.
        const tensor tf = from_xarray(full).to(dt);
        const std::vector<double> before = to_vector(tf);
        check_close(matmul_add(ta, tb, tf), prod + full);
        CHECK(to_vector(tf) == before);
        // Column-major operands and a strided (expanded) addend.
        check_close(matmul_add(ta.transpose(1, 2).contiguous().transpose(1, 2),
                               tb.transpose(0, 1).contiguous().transpose(0, 1), from_xarray(col).to(dt).expand({3, 5})),
                    prod + col);
        // k = 0: the product is empty, the result is c broadcast.
        check_close(matmul_add(zeros({3, 0}, dt), zeros({0, 5}, dt), from_xarray(row).to(dt)),
                    xt::xarray<double>(xt::zeros<double>({3, 5}) + row));
    }
    for (dtype dt : {dtype::float16, dtype::bfloat16})
    {
        INFO(name(dt));
        const tensor ta = from_xarray(a).to(dt), tb = from_xarray(b).to(dt), tc = from_xarray(row).to(dt);
        const tensor got = matmul_add(ta, tb, tc);
        CHECK(got.dtype() == dt);
        const auto want =
            to_xarray<double>(matmul_add(ta.to(dtype::float32), tb.to(dtype::float32), tc.to(dtype::float32)));
        const auto g = to_xarray<double>(got);
        const double u = dt == dtype::bfloat16 ? std::ldexp(1.0, -8) : std::ldexp(1.0, -11);
        for (std::size_t i = 0; i < want.size(); ++i)
            CHECK(std::abs(g.flat(i) - want.flat(i)) <=
                  u * std::abs(want.flat(i)) + 1e-5 * std::max(1.0, std::abs(want.flat(i))));
    }
}

TEST_CASE("concat, pad and slice values")
{
    const tensor a = arange(0, 6).reshape({2, 3}), b = arange(6, 9).reshape({1, 3});
    CHECK(to_vector(concat({a, b}, 0)) == std::vector<double>{0, 1, 2, 3, 4, 5, 6, 7, 8});
    CHECK(to_vector(concat({a, a}, -1)) == std::vector<double>{0, 1, 2, 0, 1, 2, 3, 4, 5, 3, 4, 5});
    const tensor p = pad(arange(1, 3).reshape({1, 2}), {{1, 0}, {0, 1}}, -1.0);
    CHECK(p.shape() == shape_type{2, 3});
    CHECK(to_vector(p) == std::vector<double>{-1, -1, -1, 1, 2, -1});
    CHECK(to_vector(arange(0, 10).slice(0, -4, 100, 2)) == std::vector<double>{6, 8});
    CHECK(arange(0, 10).slice(0, 7, 3).numel() == 0);
    CHECK(to_vector(arange(0, 5).slice(0, 0, 5, INT64_MAX)) == std::vector<double>{0}); // no overflow
    CHECK(to_vector(slice_backward(full({2}, 1.0), {5}, 0, 1, 3)) == std::vector<double>{0, 1, 0, 0, 1});
}

TEST_CASE("softmax family and cross-entropy values")
{
    const xt::xarray<double> z = rnd({3, 5}, 10) * 10.0; // large logits: the max shift must keep it finite
    const tensor t = from_xarray(z);
    xt::xarray<double> zmax = xt::amax(z, {1}, xt::keep_dims);
    xt::xarray<double> lse = zmax + xt::log(xt::sum(xt::exp(z - zmax), {1}, xt::keep_dims));
    check_close(log_softmax(t, 1), z - lse);
    check_close(softmax(t, -1), xt::exp(z - lse));
    const tensor labels = from_xarray(xt::xarray<std::int64_t>{4, 0, 2});
    const double want = -((z(0, 4) - lse(0, 0)) + (z(1, 0) - lse(1, 0)) + (z(2, 2) - lse(2, 0))) / 3;
    CHECK(cross_entropy(t, labels).item() == doctest::Approx(want).epsilon(1e-12));
    CHECK(cross_entropy(t, labels, reduction::sum).item() == doctest::Approx(3 * want).epsilon(1e-12));
    CHECK(cross_entropy(t, labels, reduction::none).shape() == shape_type{3});
    // Label smoothing eps: target = (1 - eps) onehot + eps / C.
    const double eps = 0.1;
    double smoothed = 0;
    for (std::size_t i = 0; i < 3; ++i)
        for (std::size_t c = 0; c < 5; ++c)
        {
            const double target = (c == static_cast<std::size_t>(xt::xarray<std::int64_t>{4, 0, 2}(i)) ? 1 - eps : 0) +
                                  eps / 5;
            smoothed -= target * (z(i, c) - lse(i, 0));
        }
    CHECK(cross_entropy(t, labels, reduction::mean, eps).item() == doctest::Approx(smoothed / 3).epsilon(1e-12));
    CHECK(to_vector(one_hot(labels, 5)) == std::vector<double>{0, 0, 0, 0, 1, 1, 0, 0, 0, 0, 0, 0, 1, 0, 0});
}

TEST_CASE("mse_loss: values, reductions, errors")
{
    const double p[4] = {1, 2, 3, 4}, t[4] = {1.5, 2, 1, 7};
    const tensor a = from_host(p, {2, 2}, dtype::float64), b = from_host(t, {2, 2}, dtype::float64);
    // Squared differences 0.25, 0, 4, 9.
    CHECK(mse_loss(a, b).item() == doctest::Approx(13.25 / 4).epsilon(1e-15));
    CHECK(mse_loss(a, b, reduction::sum).item() == doctest::Approx(13.25).epsilon(1e-15));
    CHECK(to_vector(mse_loss(a, b, reduction::none)) == std::vector<double>{0.25, 0, 4, 9});
    CHECK_THROWS_WITH_AS(mse_loss(a, b.reshape({4})), doctest::Contains("[2, 2]"), std::invalid_argument);
    CHECK_THROWS_AS(mse_loss(a, b.to(dtype::float32)), std::invalid_argument);
}

TEST_CASE("results do not depend on the thread count")
{
    const int saved = get_num_threads();
    generator g(11);
    const tensor x = randn({257, 1031}, g); // odd sizes, several chunks
    const tensor w = randn({1031, 33}, g);
    // A product small beside its depth (a weight gradient's shape), which matmul sums in
    // chunks of k by a rule of the shape alone.
    const tensor dy = randn({24, 4100}, g), cols = randn({4100, 40}, g);
    std::vector<std::vector<double>> runs;
    for (int threads : {1, 2, 3})
    {
        set_num_threads(threads);
        runs.push_back(to_vector(
            concat({sum(x, {0}), sum(x, {1}).reshape({1, -1}).reshape({-1}), max(tanh(x), {1}), sum(matmul(x, w), {1}),
                    matmul(dy, cols).reshape({-1}), matmul_add(dy, cols, sum(cols, {0})).reshape({-1})},
                   0)));
    }
    set_num_threads(saved);
    CHECK(runs[0] == runs[1]);
    CHECK(runs[0] == runs[2]);
}

namespace
{
    /// Inputs of `shape` in the op table's domain d, as float64 (seeded).
    tensor draw(tests::domain d, const shape_type& shape, std::uint64_t seed)
    {
        generator g(seed);
        tensor z = randn(shape, g, dtype::float64);
        if (d == tests::domain::positive)
            return abs(z) + 0.5;
        if (d == tests::domain::nonzero)
            return sign(z) * (abs(z) + 0.2);
        return z;
    }

    /// t's values as an xarray of its shape.
    xt::xarray<double> values(const tensor& t) { return to_xarray<double>(t.to(dtype::float64)); }
}

TEST_CASE("op table: every op code of the lists has exactly one row")
{
    for (const auto op : tests::all_unary)
    {
        INFO("unary op code ", static_cast<int>(op), " (", kernels::unary_op_names[static_cast<int>(op)], ")");
        CHECK_NOTHROW((void)tests::case_of(op));
        CHECK(std::string(tests::case_of(op).name) == kernels::unary_op_names[static_cast<int>(op)]);
    }
    for (const auto op : tests::all_binary)
    {
        INFO("binary op code ", static_cast<int>(op), " (", kernels::binary_op_names[static_cast<int>(op)], ")");
        CHECK_NOTHROW((void)tests::case_of(op));
        CHECK(std::string(tests::case_of(op).name) == kernels::binary_op_names[static_cast<int>(op)]);
    }
    for (const auto op : tests::all_reduce)
    {
        INFO("reduce op code ", static_cast<int>(op), " (", kernels::reduce_op_names[static_cast<int>(op)], ")");
        CHECK_NOTHROW((void)tests::case_of(op));
        CHECK(std::string(tests::case_of(op).name) == kernels::reduce_op_names[static_cast<int>(op)]);
    }
    CHECK(std::size(tests::unary_cases) == static_cast<std::size_t>(kernels::unary_op_count));
    CHECK(std::size(tests::binary_cases) == static_cast<std::size_t>(kernels::binary_op_count));
    CHECK(std::size(tests::reduce_cases) == static_cast<std::size_t>(kernels::reduce_op_count));
    // A code without a row is reported, naming it.
    CHECK_THROWS_WITH_AS(tests::case_of(static_cast<kernels::unary_op>(kernels::unary_op_count)),
                         doctest::Contains("unary op code"), std::logic_error);
}

TEST_CASE("op table: each unary op computes its op code's formula")
{
    for (const auto& row : tests::unary_cases)
        for (dtype dt : {dtype::float64, dtype::float32})
        {
            INFO(row.name, " ", name(dt));
            const tensor x = draw(row.dom, {3, 5}, 21).to(dt);
            xt::xarray<double> want = values(x);
            for (auto& v : want)
                v = kernels::apply(row.op, v);
            check_close(row.apply(x), want);
            const tensor xg = x.detach().requires_grad_();
            CHECK(row.apply(xg).requires_grad());
        }
}

TEST_CASE("op table: each binary op computes its op code's formula, broadcasting")
{
    for (const auto& row : tests::binary_cases)
        for (dtype dt : {dtype::float64, dtype::float32})
        {
            INFO(row.name, " ", name(dt));
            const tensor a = draw(row.a_dom, {3, 4}, 22).to(dt);
            tensor b = draw(row.b_dom, {4}, 23).to(dt);
            if (!row.differentiable) // comparisons: make some elements equal
                b = slice(a, 0, 1, 2).reshape({4}).detach();
            const xt::xarray<double> av = values(a), bv = values(b);
            xt::xarray<double> want = av;
            for (std::size_t i = 0; i < 3; ++i)
                for (std::size_t j = 0; j < 4; ++j)
                    want(i, j) = kernels::apply(row.op, av(i, j), bv(j));
            check_close(row.apply(a, b), want);
            const tensor ag = a.detach().requires_grad_();
            CHECK(row.apply(ag, b).requires_grad() == row.differentiable);
        }
}

TEST_CASE("op table: each reduction op reduces as its op code says")
{
    const auto a = rnd({3, 4, 5}, 24);
    for (const auto& row : tests::reduce_cases)
    {
        INFO(row.name);
        const tensor t = from_xarray(a);
        xt::xarray<double> want = xt::zeros<double>({3, 5});
        for (std::size_t i = 0; i < 3; ++i)
            for (std::size_t k = 0; k < 5; ++k)
            {
                double acc = row.op == kernels::reduce_op::sum ? 0.0 : a(i, 0, k);
                for (std::size_t j = 0; j < 4; ++j)
                    acc = row.op == kernels::reduce_op::sum ? acc + a(i, j, k) : std::max(acc, a(i, j, k));
                want(i, k) = acc;
            }
        check_close(row.apply(t, {1}, false), want);
        if (row.empty_allowed)
            CHECK(to_vector(row.apply(zeros({0, 2}, dtype::float64), {0}, false)) == std::vector<double>{0, 0});
        else
            CHECK_THROWS_AS(row.apply(zeros({0, 2}, dtype::float64), {0}, false), std::invalid_argument);
    }
}

namespace
{
    /// argmax along dim of x (contiguous, float64 values) by a direct loop: the first NaN,
    /// else the first largest; the result as a flat row-major vector of the kept dims.
    std::vector<double> direct_argmax(const std::vector<double>& v, const shape_type& shape, std::size_t dim)
    {
        std::int64_t outer = 1, inner = 1;
        for (std::size_t d = 0; d < dim; ++d)
            outer *= shape[d];
        for (std::size_t d = dim + 1; d < shape.size(); ++d)
            inner *= shape[d];
        const std::int64_t n = shape[dim];
        std::vector<double> out;
        for (std::int64_t o = 0; o < outer; ++o)
            for (std::int64_t i = 0; i < inner; ++i)
            {
                auto at = [&](std::int64_t r) { return v[static_cast<std::size_t>((o * n + r) * inner + i)]; };
                std::int64_t best = 0;
                for (std::int64_t r = 1; r < n && !std::isnan(at(best)); ++r)
                    if (std::isnan(at(r)) || at(r) > at(best))
                        best = r;
                out.push_back(static_cast<double>(best));
            }
        return out;
    }
}

TEST_CASE("argmax: every dim, keepdim, ties and NaN, against a direct loop")
{
    generator g(31);
    const shape_type shape = {3, 4, 5};
    // Values from {-1, 0, 1}: ties in most rows; a few NaN.
    tensor x = sign(randn(shape, g, dtype::float64));
    std::vector<double> v = to_vector(x);
    v[7] = NAN;
    v[31] = NAN;
    v[33] = NAN;
    x = from_host(v.data(), shape, dtype::float64);
    for (dtype dt : {dtype::float64, dtype::float32, dtype::float16, dtype::bfloat16})
        for (std::int64_t dim = -3; dim < 3; ++dim)
        {
            INFO(name(dt), " dim ", dim);
            const std::size_t d = static_cast<std::size_t>(dim < 0 ? dim + 3 : dim);
            const tensor y = argmax(x.to(dt), dim);
            CHECK(y.dtype() == dtype::int64);
            shape_type kept = shape;
            kept.erase(kept.begin() + static_cast<std::ptrdiff_t>(d));
            CHECK(y.shape() == kept);
            CHECK(to_vector(y) == direct_argmax(v, shape, d));
            shape_type ks = shape;
            ks[d] = 1;
            const tensor yk = argmax(x.to(dt), dim, true);
            CHECK(yk.shape() == ks);
            CHECK(to_vector(yk) == direct_argmax(v, shape, d));
        }
    // A strided view, and int64 input (compared exactly).
    const tensor t = transpose(from_host(v.data(), shape, dtype::float64), 0, 2);
    CHECK(to_vector(argmax(t, 0)) == to_vector(argmax(contiguous(t), 0)));
    const std::int64_t big[3] = {std::int64_t{1} << 60, (std::int64_t{1} << 60) + 1, std::int64_t{1} << 60};
    CHECK(argmax(from_host(big, {3}, dtype::int64)).item() == 1.0);
}

TEST_CASE("argmax: first maximum wins, NaN is the maximum, no gradient, clear errors")
{
    const tensor x = from_host(std::vector<double>{1, 3, 3, 2}.data(), {4}, dtype::float64).requires_grad_();
    const tensor y = argmax(x);
    CHECK(y.item() == 1.0);
    CHECK_FALSE(y.requires_grad());
    CHECK(argmax(from_host(std::vector<double>{1, NAN, 9, NAN}.data(), {4}, dtype::float64)).item() == 1.0);
    CHECK(argmax(from_host(std::vector<double>{-INFINITY, -INFINITY}.data(), {2}, dtype::float64)).item() == 0.0);
    CHECK(argmax(full({}, 5.0)).shape() == shape_type{});
    CHECK(argmax(full({}, 5.0)).item() == 0.0);
    CHECK(argmax(zeros({0, 3}), 1).shape() == shape_type{0}); // empty kept extent: an empty result
    CHECK_THROWS_WITH_AS(argmax(zeros({2, 0}), 1), doctest::Contains("extent 0"), xgrad::invalid_argument);
    CHECK_THROWS_WITH_AS(argmax(zeros({2, 3}), 2), doctest::Contains("argmax"), std::invalid_argument);
    CHECK_THROWS_AS(argmax(zeros({2, 3}), -3), std::invalid_argument);
    CHECK_THROWS_WITH_AS(argmax(tensor{}), doctest::Contains("undefined"), xgrad::invalid_argument);
}
