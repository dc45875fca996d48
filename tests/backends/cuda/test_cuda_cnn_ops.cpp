// The CNN ops and matmul on cuda:0 against the CPU: conv2d, pooling, one_hot / cross-entropy,
// take / put_add and matmul, forward and backward (through a random weighting of the result so
// that every gradient entry matters), within cuda_test::tolerance. Their kernels are tested
// one by one in test_cuda_index.cpp.
#include "tests/backends/cuda/cuda_test_helpers.hpp"

#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#include "core/src/dispatch.hpp"

using namespace cuda_test;

namespace
{
    using op_fn = std::function<tensor(const std::vector<tensor>&)>;

    /// Runs f on `inputs` (CPU tensors) on the CPU and on cuda:0, with gradients w.r.t. the
    /// inputs whose `grad` flag is set, of sum(f(...) * r) for a random r; compares the
    /// results and every gradient. Returns the device result and gradients (for determinism
    /// checks).
    std::vector<tensor> check_op(const op_fn& f, const std::vector<tensor>& inputs, const std::vector<bool>& grad,
                                 const std::string& what, std::uint64_t seed = 99)
    {
        INFO(what);
        std::vector<tensor> hc, hd;
        for (std::size_t k = 0; k < inputs.size(); ++k)
        {
            tensor c = inputs[k].detach(), d = inputs[k].to(gpu).detach();
            if (grad[k])
            {
                c.requires_grad_(true);
                d.requires_grad_(true);
            }
            hc.push_back(c);
            hd.push_back(d);
        }
        const tensor yc = f(hc), yd = f(hd);
        CHECK(yd.device() == gpu);
        check_close(yc, yd, what + ": forward");
        std::vector<tensor> results{yd};
        if (std::find(grad.begin(), grad.end(), true) == grad.end())
            return results;
        const tensor r = random_cpu(yc.shape(), yc.dtype(), seed);
        sum(yc * r).backward();
        sum(yd * r.to(gpu)).backward();
        for (std::size_t k = 0; k < inputs.size(); ++k)
            if (grad[k])
            {
                REQUIRE(hd[k].grad().defined());
                CHECK(hd[k].grad().device() == gpu);
                check_close(hc[k].grad(), hd[k].grad(), what + ": gradient of input " + std::to_string(k));
                results.push_back(hd[k].grad());
            }
        return results;
    }

    /// The message of the std::invalid_argument that f throws ("" when it throws none).
    template <class F>
    std::string invalid_argument_message(F f)
    {
        try
        {
            f();
        }
        catch (const std::invalid_argument& e)
        {
            return e.what();
        }
        return "";
    }
}

TEST_CASE("cuda ops: conv2d forward and gradients match the CPU (layouts, groups, stride, padding, dilation)")
{
    struct conv_case
    {
        std::int64_t n, c, h, w, o, kh, kw, groups;
        conv2d_params p;
        bool bias;
    };
    const std::vector<conv_case> cases = {
        {2, 3, 7, 6, 4, 3, 3, 1, {{1, 1}, {1, 1}, {1, 1}, 1}, true},
        {1, 4, 9, 8, 6, 3, 2, 2, {{2, 1}, {0, 1}, {1, 1}, 2}, true},
        {2, 2, 8, 9, 3, 2, 3, 1, {{1, 2}, {2, 0}, {2, 1}, 1}, false},
        {3, 6, 5, 5, 6, 1, 1, 3, {{1, 1}, {0, 0}, {1, 1}, 3}, true},
        {1, 1, 11, 4, 2, 5, 3, 1, {{3, 1}, {2, 1}, {1, 2}, 1}, true},
    };
    std::uint64_t seed = 100;
    for (const dtype dt : {dtype::float32, dtype::float64})
        for (const conv_case& k : cases)
            for (const bool nhwc : {false, true})
            {
                const tensor x = random_cpu(nhwc ? shape_type{k.n, k.h, k.w, k.c} : shape_type{k.n, k.c, k.h, k.w}, dt,
                                            ++seed);
                const tensor wt = random_cpu({k.o, k.c / k.groups, k.kh, k.kw}, dt, ++seed);
                const tensor b = random_cpu({k.o}, dt, ++seed);
                const conv2d_params p = k.p;
                const char* fmt = nhwc ? "NHWC" : "NCHW";
                const std::string what = std::string("conv2d ") + fmt + " " + std::string(name(dt)) + " groups " +
                                         std::to_string(k.groups) + (k.bias ? " bias" : "");
                const op_fn f = [&](const std::vector<tensor>& in) {
                    return conv2d(in[0], in[1], k.bias ? in[2] : tensor{}, p, fmt);
                };
                const auto first = check_op(f, {x, wt, b}, {true, true, k.bias}, what);
                // Determinism: a second device run gives the same bits.
                const auto second = check_op(f, {x, wt, b}, {true, true, k.bias}, what + " (again)");
                REQUIRE(first.size() == second.size());
                for (std::size_t i = 0; i < first.size(); ++i)
                    check_same_bits(first[i], second[i], what + ": two runs, result " + std::to_string(i));
            }
}

TEST_CASE("cuda ops: unfold2d and fold2d ops match the CPU in every float dtype")
{
    window2d w;
    w.kernel = {3, 2};
    w.stride = {2, 1};
    w.padding = {1, 1};
    w.dilation = {1, 2};
    for (const dtype dt : float_dtypes)
        for (const char* fmt : {"NCHW", "NHWC"})
        {
            const bool nhwc = std::string(fmt) == "NHWC";
            const shape_type shape = nhwc ? shape_type{2, 7, 6, 3} : shape_type{2, 3, 7, 6};
            const tensor x = random_cpu(shape, dt, 7);
            const tensor cols = unfold2d(x, w, fmt, 0.5);
            check_same_bits(cols, unfold2d(x.to(gpu), w, fmt, 0.5), std::string("unfold2d op ") + fmt);
            const tensor g = random_cpu(cols.shape(), dt, 8);
            check_same_bits(fold2d(g, shape, w, fmt), fold2d(g.to(gpu), shape, w, fmt),
                            std::string("fold2d op ") + fmt);
        }
}

TEST_CASE("cuda ops: max_pool2d and avg_pool2d forward and backward match the CPU")
{
    std::uint64_t seed = 300;
    for (const dtype dt : {dtype::float32, dtype::float64})
        for (const bool nhwc : {false, true})
        {
            const char* fmt = nhwc ? "NHWC" : "NCHW";
            const shape_type shape = nhwc ? shape_type{2, 9, 7, 3} : shape_type{2, 3, 9, 7};
            std::vector<pool2d_params> params(4);
            params[1].kernel = {3, 3};
            params[1].stride = std::array<std::int64_t, 2>{2, 1};
            params[1].padding = {1, 1};
            params[2].kernel = {3, 2};
            params[2].stride = std::array<std::int64_t, 2>{1, 1}; // overlapping windows share maxima
            params[2].dilation = {2, 1};
            params[3].kernel = {2, 3};
            params[3].padding = {1, 1};
            params[3].count_include_pad = false;
            for (std::size_t i = 0; i < params.size(); ++i)
            {
                const pool2d_params p = params[i];
                const std::string what = std::string(fmt) + " " + std::string(name(dt)) + " params " +
                                         std::to_string(i);
                const tensor x = random_cpu(shape, dtype::float64, ++seed, -3.0, 3.0);
                const tensor xt = (dt == dtype::float64 ? x : x.to(dt));
                check_op([&](const std::vector<tensor>& in) { return max_pool2d(in[0], p, fmt); }, {xt}, {true},
                         "max_pool2d " + what);
                // Rounded down to integers: ties inside windows.
                const std::vector<double> ties = to_vector(x);
                std::vector<double> rounded(ties.size());
                for (std::size_t k = 0; k < ties.size(); ++k)
                    rounded[k] = std::floor(ties[k]);
                const tensor xi = from_host(rounded.data(), shape, dtype::float64).to(dt);
                check_op([&](const std::vector<tensor>& in) { return max_pool2d(in[0], p, fmt); }, {xi}, {true},
                         "max_pool2d with ties " + what);
                check_op([&](const std::vector<tensor>& in) { return avg_pool2d(in[0], p, fmt); }, {xt}, {true},
                         "avg_pool2d " + what);
            }
        }
    // 16-bit forward: the selection and the gather move bits.
    for (const dtype dt : {dtype::float16, dtype::bfloat16})
    {
        const tensor x = random_cpu({2, 3, 8, 8}, dt, 5);
        pool2d_params p;
        p.kernel = {3, 3};
        p.padding = {1, 1};
        check_same_bits(max_pool2d(x, p), max_pool2d(x.to(gpu), p), "max_pool2d 16-bit");
    }
}

TEST_CASE("cuda ops: one_hot and cross-entropy with labels match the CPU")
{
    const std::vector<std::int64_t> labels = {3, 0, 4, 4, 1, 2, 0};
    const tensor l = int64_tensor(labels), ld = l.to(gpu);
    for (const dtype dt : float_dtypes)
        check_same_bits(one_hot(l, 5, dt), one_hot(ld, 5, dt), "one_hot " + std::string(name(dt)));
    std::vector<std::int64_t> bad = labels;
    bad[4] = 5;
    bad[6] = -1;
    const std::string cpu_msg = invalid_argument_message([&] { one_hot(int64_tensor(bad), 5); });
    const std::string dev_msg = invalid_argument_message([&] { one_hot(int64_tensor(bad).to(gpu), 5); });
    CHECK(!cpu_msg.empty());
    CHECK(cpu_msg == dev_msg);

    for (const dtype dt : {dtype::float32, dtype::float64})
        for (const double smoothing : {0.0, 0.1})
            for (const reduction red : {reduction::mean, reduction::sum, reduction::none})
            {
                const tensor logits = random_cpu({7, 5}, dt, 11, -4.0, 4.0);
                const std::string what = "cross_entropy " + std::string(name(dt)) + " smoothing " +
                                         std::to_string(smoothing) + " reduction " + std::to_string(int(red));
                check_op([&](const std::vector<tensor>& in) { return cross_entropy(in[0], in[1], red, smoothing); },
                         {logits, l}, {true, false}, what);
            }
}

TEST_CASE("cuda ops: take and put_add match the CPU, forward, backward and errors")
{
    for (const dtype dt : {dtype::float32, dtype::float64})
    {
        const tensor x = random_cpu({4, 6}, dt, 21);
        const std::vector<std::int64_t> pos = {5, 0, 23, 5, 5, 17, 2, 0, 11, 23};
        const tensor idx = int64_tensor(pos).reshape({2, 5});
        check_op([&](const std::vector<tensor>& in) { return take(in[0], in[1]); }, {x, idx}, {true, false},
                 "take " + std::string(name(dt)));
        // take of a strided view reads it in row-major order
        check_op([&](const std::vector<tensor>& in) { return take(in[0].transpose(0, 1), in[1]); }, {x, idx},
                 {true, false}, "take of a transposed view " + std::string(name(dt)));
        const tensor g = random_cpu({2, 5}, dt, 22);
        check_op(
            [&](const std::vector<tensor>& in) {
                return put_add(in[0], in[1], {3, 8});
            },
            {g, idx}, {true, false}, "put_add " + std::string(name(dt)));
    }
    // The error names the same position and value on both devices.
    const tensor x = random_cpu({10}, dtype::float32, 1);
    const tensor bad = int64_tensor({3, 10, -1, 4});
    const std::string cpu_msg = invalid_argument_message([&] { take(x, bad); });
    const std::string dev_msg = invalid_argument_message([&] { take(x.to(gpu), bad.to(gpu)); });
    CHECK(cpu_msg.find("idx[1]") != std::string::npos);
    CHECK(cpu_msg == dev_msg);
    CHECK_THROWS_AS(put_add(x.to(gpu).slice(0, 0, 4), bad.to(gpu), {10}), std::invalid_argument);
}

TEST_CASE(
    "cuda ops: matmul and matmul_add forward and backward match the CPU (2-d, batched, transposed, broadcast, 1-d)")
{
    const op_fn mm = [](const std::vector<tensor>& in) { return matmul(in[0], in[1]); };
    const op_fn mm_ta = [](const std::vector<tensor>& in) { return matmul(in[0].transpose(-1, -2), in[1]); };
    const op_fn mm_tb = [](const std::vector<tensor>& in) { return matmul(in[0], in[1].transpose(-1, -2)); };
    const op_fn mma = [](const std::vector<tensor>& in) { return matmul_add(in[0], in[1], in[2]); };
    std::uint64_t seed = 500;
    for (const dtype dt : {dtype::float32, dtype::float64})
    {
        const std::string t = " " + std::string(name(dt));
        auto r = [&](const shape_type& s) { return random_cpu(s, dt, ++seed); };
        check_op(mm, {r({5, 7}), r({7, 3})}, {true, true}, "2-d" + t);
        check_op(mm, {r({4, 5, 7}), r({4, 7, 3})}, {true, true}, "batched" + t);
        check_op(mm_ta, {r({7, 5}), r({7, 3})}, {true, true}, "transposed a" + t);
        check_op(mm_tb, {r({4, 5, 7}), r({4, 3, 7})}, {true, true}, "batched, transposed b" + t);
        check_op(mm, {r({2, 1, 5, 7}), r({3, 7, 4})}, {true, true}, "broadcast batch" + t);
        check_op(mm, {r({5, 7}), r({3, 7, 4})}, {true, true}, "broadcast 2-d over a batch" + t);
        check_op(mm, {r({7}), r({7, 4})}, {true, true}, "1-d @ 2-d" + t);
        check_op(mm, {r({3, 5, 7}), r({7})}, {true, true}, "batched @ 1-d" + t);
        check_op(mm, {r({64, 130}), r({130, 33})}, {true, true}, "larger" + t);
        check_op(mm, {r({3, 0}), r({0, 4})}, {true, true}, "k = 0" + t);
        // matmul_add: the GEMM accumulating into the broadcast addend (cuBLAS beta = 1).
        check_op(mma, {r({5, 7}), r({7, 3}), r({3})}, {true, true, true}, "matmul_add, bias per column" + t);
        check_op(mma, {r({4, 5, 7}), r({7, 3}), r({5, 1})}, {true, true, true}, "matmul_add, batched, per row" + t);
        check_op(mma, {r({64, 130}), r({130, 33}), r({64, 33})}, {true, true, true}, "matmul_add, larger" + t);
        check_op(mma, {r({3, 0}), r({0, 4}), r({4})}, {true, true, true}, "matmul_add, k = 0" + t);
    }
}
