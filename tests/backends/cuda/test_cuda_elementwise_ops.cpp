// The public elementwise ops on cuda:0 against the same ops on the CPU: unary, binary with
// broadcasting, where, casts between all dtypes, full / zeros / ones, contiguous() of views,
// 16-bit ops and gradients. Tolerances: test_cuda_elementwise.cpp's header.
#include "tests/backends/cuda/cuda_elementwise_helpers.hpp"

using namespace cuda_elementwise_test;

// =============================================================================================
// Public ops on cuda:0 against the CPU

TEST_CASE("cuda ops: unary ops on random shapes and views")
{
    std::mt19937_64 gen(201);
    const std::vector<std::pair<std::string, tensor (*)(const tensor&)>> ops = {
        {"neg", neg}, {"exp", exp},   {"log", log},         {"sqrt", sqrt}, {"rsqrt", rsqrt},
        {"abs", abs}, {"relu", relu}, {"sigmoid", sigmoid}, {"tanh", tanh}};
    std::uint64_t seed = 1;
    for (const auto& [op_name, f] : ops)
        for (const dtype dt : {dtype::float32, dtype::float64})
            for (int rep = 0; rep < 5; ++rep)
            {
                const shape_type shape = op_shape(gen);
                const bool positive_domain = op_name == "log" || op_name == "sqrt" || op_name == "rsqrt";
                const double lo = positive_domain ? -0.5 : op_name == "exp" ? -30 : -6;
                const double hi = positive_domain ? 50 : op_name == "exp" ? 30 : 6;
                const auto [xc, xd] = view_pair(shape, rep % 3, gen,
                                                [&](const shape_type& s) { return random_cpu(s, dt, seed++, lo, hi); });
                const tensor yc = f(xc), yd = f(xd);
                const std::string what = op_name + " of " + describe(xc);
                const bool exact = op_name != "exp" && op_name != "log" && op_name != "sigmoid" && op_name != "tanh";
                if (exact)
                    check_identical(yc, yd, true, what);
                else
                    check_ulps(yc, yd, libm_ulps, what);
            }
}

TEST_CASE("cuda ops: binary ops and comparisons with broadcasting, on views")
{
    std::mt19937_64 gen(202);
    const std::vector<std::pair<std::string, tensor (*)(const tensor&, const tensor&)>> ops = {
        {"add", add}, {"sub", sub}, {"mul", mul}, {"div", div}, {"pow", pow}, {"eq", eq},
        {"ne", ne},   {"lt", lt},   {"le", le},   {"gt", gt},   {"ge", ge}};
    std::uint64_t seed = 1000;
    for (const auto& [op_name, f] : ops)
        for (const dtype dt : {dtype::float32, dtype::float64})
            for (int rep = 0; rep < 5; ++rep)
            {
                const shape_type sa = op_shape(gen);
                const shape_type sb = broadcast_partner(sa, gen);
                const bool is_pow = op_name == "pow";
                // Comparisons see equal values: both operands from a coarse grid.
                const bool grid = op_name.size() == 2;
                const auto make_a = [&](const shape_type& s) {
                    const tensor t = random_cpu(s, dt, seed++, is_pow ? 0.05 : -3, is_pow ? 4 : 3);
                    return grid ? relu(t) - relu(t - 1.0) : t; // many exact 0s and 1s
                };
                const auto make_b = [&](const shape_type& s) {
                    const tensor t = random_cpu(s, dt, seed++, is_pow ? -4 : -3, is_pow ? 4 : 3);
                    return grid ? relu(t) - relu(t - 1.0) : t;
                };
                auto [ac, ad] = view_pair(sa, rep % 3, gen, make_a);
                auto [bc, bd] = view_pair(sb, (rep + 1) % 3, gen, make_b);
                if (rep == 4) // swap: the broadcast operand first
                {
                    std::swap(ac, bc);
                    std::swap(ad, bd);
                }
                const tensor yc = f(ac, bc), yd = f(ad, bd);
                const std::string what = op_name + " of " + describe(ac) + " and " + describe(bc);
                if (is_pow)
                    check_ulps(yc, yd, libm_ulps, what);
                else
                    check_identical(yc, yd, true, what);
            }
}

TEST_CASE("cuda ops: where with broadcasting")
{
    std::mt19937_64 gen(203);
    std::uint64_t seed = 2000;
    for (const dtype dt : {dtype::float32, dtype::float64})
        for (int rep = 0; rep < 8; ++rep)
        {
            const shape_type shape = op_shape(gen);
            const auto [cc, cd] = view_pair(broadcast_partner(shape, gen), rep % 3, gen, [&](const shape_type& s) {
                return gt(random_cpu(s, dt, seed++, -1, 1), zeros({}, dt)); // 0 or 1
            });
            const auto [ac, ad] = view_pair(shape, (rep + 1) % 3, gen,
                                            [&](const shape_type& s) { return random_cpu(s, dt, seed++); });
            const auto [bc, bd] = view_pair(broadcast_partner(shape, gen), (rep + 2) % 3, gen,
                                            [&](const shape_type& s) { return random_cpu(s, dt, seed++); });
            check_identical(where(cc, ac, bc), where(cd, ad, bd), false,
                            "where of " + describe(cc) + ", " + describe(ac) + ", " + describe(bc));
        }
}

namespace
{
    bool cast_nan_any(dtype from, dtype to)
    {
        if (to == dtype::float64)
            return from != dtype::float64 && from != dtype::int64;
        return to == dtype::float32 && from == dtype::float64;
    }

    /// A float64 CPU tensor of specials and random values of every magnitude.
    tensor cast_source_values(std::mt19937_64& gen, std::int64_t n)
    {
        std::vector<double> v = special_doubles();
        std::normal_distribution<double> normal(0, 1);
        std::uniform_int_distribution<int> exponent(-40, 70);
        while (static_cast<std::int64_t>(v.size()) < n)
            v.push_back(std::ldexp(normal(gen), exponent(gen)));
        std::shuffle(v.begin(), v.end(), gen);
        v.resize(static_cast<std::size_t>(n));
        return from_host(v.data(), {n}, dtype::float64);
    }
}

TEST_CASE("cuda ops: casts between all dtypes, on views, give the CPU's bits")
{
    std::mt19937_64 gen(205);
    const dtype all[] = {dtype::float32, dtype::float64, dtype::float16, dtype::bfloat16, dtype::int64};
    for (const dtype from : all)
        for (const dtype to : all)
        {
            // 6 * 7 * 11 = 462 elements, viewed permuted; the source made on the CPU by a cast of
            // float64 values (and int64 extremes for an int64 source).
            tensor src = cast_source_values(gen, 462).to(from);
            if (from == dtype::int64)
            {
                std::vector<std::int64_t> ints(462);
                random_values(ints, gen);
                src = from_host(ints.data(), {462}, dtype::int64);
            }
            const tensor xc = src.reshape({6, 7, 11}).permute({2, 0, 1});
            const tensor xd = src.to(gpu).reshape({6, 7, 11}).permute({2, 0, 1});
            const std::string what = std::string("cast ") + std::string(name(from)) + " -> " + std::string(name(to));
            check_identical(xc.to(to), xd.to(to), cast_nan_any(from, to), what);
            check_identical(xc.slice(1, 1, 6, 2).to(to), xd.slice(1, 1, 6, 2).to(to), cast_nan_any(from, to),
                            what + " (sliced)");
        }
}

TEST_CASE("cuda ops: full, zeros and ones give the CPU's bits in every dtype")
{
    std::mt19937_64 gen(206);
    const dtype all[] = {dtype::float32, dtype::float64, dtype::float16, dtype::bfloat16, dtype::int64};
    for (const dtype dt : all)
    {
        for (const double v : special_doubles())
        {
            const shape_type shape = op_shape(gen, 3, 5000);
            check_identical(full(shape, v, dt), full(shape, v, dt, gpu), false,
                            "full " + std::string(name(dt)) + " " + std::to_string(v));
        }
        check_identical(zeros({3, 0, 2}, dt), zeros({3, 0, 2}, dt, gpu), false, "zeros, empty");
        check_identical(zeros({}, dt), zeros({}, dt, gpu), false, "zeros, 0-d");
        check_identical(ones({17, 5}, dt), ones({17, 5}, dt, gpu), false, "ones");
        check_identical(zeros_like(ones({4, 9}, dt)), zeros_like(ones({4, 9}, dt, gpu)), false, "zeros_like");
    }
}

TEST_CASE("cuda ops: contiguous() of permuted, sliced and expanded views, every dtype")
{
    std::mt19937_64 gen(207);
    const dtype all[] = {dtype::float32, dtype::float64, dtype::float16, dtype::bfloat16, dtype::int64};
    for (const dtype dt : all)
        for (int rep = 0; rep < 6; ++rep)
        {
            const shape_type shape = op_shape(gen, 4, 20000);
            const auto [xc, xd] = view_pair(shape, 1 + rep % 2, gen, [&](const shape_type& s) {
                return cast_source_values(gen, std::max<std::int64_t>(1, ckt::numel(s)))
                    .slice(0, 0, ckt::numel(s))
                    .reshape(s)
                    .to(dt);
            });
            const tensor yd = xd.contiguous();
            CHECK(yd.is_contiguous());
            check_identical(xc.contiguous(), yd, false, "contiguous of " + describe(xc));
        }
    const tensor row = random_cpu({1, 37}, dtype::float32, 9);
    check_identical(row.expand({23, 37}).contiguous(), row.to(gpu).expand({23, 37}).contiguous(), false,
                    "contiguous of an expanded row");
}

TEST_CASE("cuda ops: 16-bit tensors compute in float32 and round as on the CPU")
{
    std::uint64_t seed = 4000;
    for (const dtype dt : {dtype::float16, dtype::bfloat16})
    {
        const tensor ac = random_cpu({31, 65}, dt, seed++, -4, 4), bc = random_cpu({65}, dt, seed++, -4, 4);
        const tensor ad = ac.to(gpu), bd = bc.to(gpu);
        const std::string n(name(dt));
        // exact in float32, then one rounding: the same bits
        check_identical(ac + bc, ad + bd, true, n + " add");
        check_identical(ac * bc, ad * bd, true, n + " mul");
        check_identical(ac / bc, ad / bd, true, n + " div");
        check_identical(lt(ac, bc), lt(ad, bd), false, n + " lt");
        check_identical(relu(ac), relu(ad), false, n + " relu");
        check_identical(sqrt(abs(ac)), sqrt(abs(ad)), false, n + " sqrt");
        check_identical(max(ac, {1}), max(ad, {1}), false, n + " max");
        // a few ulp of float32, then one rounding: one 16-bit step at most
        check_close(exp(ac), exp(ad), n + " exp");
        check_close(sigmoid(ac), sigmoid(ad), n + " sigmoid");
        check_close(sum(ac, {0}), sum(ad, {0}), n + " sum");
        check_close(mean(ac), mean(ad), n + " mean");
    }
}

TEST_CASE("cuda ops: gradients through elementwise ops and reductions match the CPU's")
{
    std::uint64_t seed = 5000;
    for (const dtype dt : {dtype::float64, dtype::float32})
    {
        const tensor x0 = random_cpu({6, 9}, dt, seed++, -2, 2), w0 = random_cpu({9}, dt, seed++, 0.5, 1.5),
                     b0 = random_cpu({6, 1}, dt, seed++);
        const auto grads = [&](device d) {
            tensor x = x0.to(d).detach(), w = w0.to(d).detach(), b = b0.to(d).detach();
            x.requires_grad_(true);
            w.requires_grad_(true);
            b.requires_grad_(true);
            const tensor h = sigmoid(x * w + b) * tanh(x) - exp(-abs(x)) / (1.0 + relu(b));
            const tensor loss = sum(h * h) + mean(max(h, {1}, true) * b) + sum(pow(abs(x) + 1.0, w)) +
                                sum(where(gt(x, b), sqrt(w * w + 1.0), log(w)));
            loss.backward();
            return std::vector<tensor>{loss.detach(), x.grad(), w.grad(), b.grad()};
        };
        const auto gc = grads(cpu_device), gd = grads(gpu);
        const char* names[] = {"loss", "dx", "dw", "db"};
        for (std::size_t i = 0; i < gc.size(); ++i)
        {
            CHECK(gd[i].device() == gpu);
            check_close(gc[i], gd[i], std::string(name(dt)) + " " + names[i]);
        }
    }
}
