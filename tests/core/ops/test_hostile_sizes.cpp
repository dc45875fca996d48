// Hostile sizes: extents, widths, kernels and labels chosen so that a size computed from them
// overflows int64, or so that work or scratch sized by a parameter (not by the data) would be
// enormous. Each op must either give a valid (often empty) result at a cost set by the data
// and the output, or throw xgrad::invalid_argument naming the op and the operands.
//
// Nothing here allocates more than a few kilobytes once the ops are right. Where a wrong op
// would ask for gigabytes of scratch, the case runs under an address-space limit (a few GiB
// above the process's current size), so that the request fails with std::bad_alloc and the
// test fails instead of the machine swapping. Sanitizer builds reserve terabytes of shadow
// memory up front, so there the limit is not set.
#include <doctest/doctest.h>

#include <sys/resource.h>

#include <cmath>
#include <cstdint>
#include <fstream>
#include <limits>
#include <string>
#include <vector>

#include "tests/support/check_error.hpp"
#include "xgrad/checked.hpp"
#include "xgrad/xgrad.hpp"

using namespace xgrad;

namespace
{
    constexpr std::int64_t big = std::numeric_limits<std::int64_t>::max();
    constexpr std::int64_t int32_max = std::numeric_limits<std::int32_t>::max();
    constexpr std::int64_t p31 = std::int64_t{1} << 31;
    constexpr std::int64_t p40 = std::int64_t{1} << 40;
    constexpr std::int64_t p62 = std::int64_t{1} << 62;

#if defined(__SANITIZE_ADDRESS__)
    constexpr bool sanitized = true;
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
    constexpr bool sanitized = true;
#else
    constexpr bool sanitized = false;
#endif
#else
    constexpr bool sanitized = false;
#endif

    /// Limits the address space to the current size plus 3 GiB while alive (not in sanitizer
    /// builds), so that an allocation sized by a hostile parameter fails fast.
    class address_space_limit
    {
    public:
        address_space_limit()
        {
            if (sanitized || getrlimit(RLIMIT_AS, &m_old) != 0)
                return;
            std::ifstream statm("/proc/self/statm");
            std::uint64_t pages = 0;
            if (!(statm >> pages))
                return;
            rlimit lim = m_old;
            const rlim_t want = static_cast<rlim_t>(pages) * 4096 + (rlim_t{3} << 30);
            if (m_old.rlim_max != RLIM_INFINITY && want > m_old.rlim_max)
                return;
            lim.rlim_cur = want;
            m_set = setrlimit(RLIMIT_AS, &lim) == 0;
        }
        ~address_space_limit()
        {
            if (m_set)
                setrlimit(RLIMIT_AS, &m_old);
        }
        address_space_limit(const address_space_limit&) = delete;
        address_space_limit& operator=(const address_space_limit&) = delete;

    private:
        rlimit m_old{};
        bool m_set = false;
    };

    pool2d_params pool(std::array<std::int64_t, 2> kernel)
    {
        pool2d_params p;
        p.kernel = kernel;
        return p;
    }
}

TEST_CASE("pad: widths whose sum with the extent overflows are reported")
{
    CHECK_ERROR(pad(zeros({2}), {{big, big}}), xgrad::invalid_argument, "pad", "dimension 0", "9223372036854775807",
                "overflows");
    CHECK_ERROR(pad(zeros({2}), {{big - 1, 0}}), xgrad::invalid_argument, "pad", "9223372036854775806", "overflows");
    CHECK_ERROR(pad(zeros({1, 3}), {{0, 0}, {0, big - 2}}), xgrad::invalid_argument, "pad", "dimension 1", "3 +",
                "overflows");
    // A pad that fits still works.
    CHECK(pad(zeros({2}), {{1, 2}}).shape() == shape_type{5});
}

TEST_CASE("contiguous strides of an empty shape with huge extents are defined, not wrapped")
{
    // The products do not fit int64: an empty tensor addresses no element, so its strides are
    // all 1 then, and it is as valid as [2^40, 2^40, 0] below.
    CHECK(contiguous_strides({0, p40, p40}) == strides_type{1, 1, 1});
    CHECK(contiguous_strides({5, p62, 5, 0}) == strides_type{1, 1, 1, 1});
    const tensor h = zeros({0, p40, p40});
    CHECK(h.numel() == 0);
    CHECK(h.strides() == strides_type{1, 1, 1});
    CHECK(ones_like(expand(zeros({1, 1, 1}), {0, p40, p40})).shape() == shape_type{0, p40, p40});
    // Where the strides fit, the empty tensor is valid.
    CHECK(contiguous_strides({0, p31, p31}) == strides_type{p62, p31, 1});
    const tensor e = zeros({0, p31, p31});
    CHECK(e.numel() == 0);
    CHECK(e.strides() == strides_type{p62, p31, 1});
    // The outermost stride is not a product of all extents, so it does not overflow, and the
    // element count is 0 however large the extents before the zero are.
    CHECK(contiguous_strides({p40, p40, 0}) == strides_type{p40, 1, 1});
    CHECK(numel_of({p40, p40, 0}) == 0);
    CHECK(zeros({p40, p40, 0}).strides() == strides_type{p40, 1, 1});
    CHECK_ERROR(numel_of({p40, p40, 1}), xgrad::invalid_argument, "too many elements");
}

TEST_CASE("reshape: an overflowing product of the given extents is reported, not wrapped")
{
    const tensor x = zeros({8});
    CHECK_ERROR(reshape(x, {p62, 4, -1}), xgrad::invalid_argument, "reshape", "[4611686018427387904, 4, -1]",
                "overflows");
    CHECK_ERROR(reshape(x, {p62, 4}), xgrad::invalid_argument, "reshape", "[4611686018427387904, 4]", "overflows");
    CHECK_ERROR(reshape(x, {-1, p62, 4}), xgrad::invalid_argument, "reshape", "overflows");
    // A zero extent makes the shape empty whatever the others are.
    CHECK(reshape(zeros({0}), {p62, 4, 0}).shape() == shape_type{p62, 4, 0});
    CHECK_ERROR(reshape(zeros({0}), {p62, 0, -1}), xgrad::invalid_argument, "reshape", "cannot infer -1");
    CHECK(reshape(x, {2, -1}).shape() == shape_type{2, 4});
}

TEST_CASE("slice: a huge step and its backward stay in range")
{
    const tensor x = zeros({5});
    CHECK(slice(x, 0, 0, 5, big).shape() == shape_type{1});
    CHECK(slice(x, 0, 1, 5, big - 1).shape() == shape_type{1});
    // slice_backward rejects a count that overruns the shape without computing start + count * step.
    CHECK_ERROR(slice_backward(zeros({2}), {5}, 0, 1, big), xgrad::invalid_argument, "slice_backward", "overrun");
    CHECK_ERROR(slice_backward(zeros({1}), {5}, 0, big, 1), xgrad::invalid_argument, "slice_backward", "overrun");
    // Its own gradient slices with a stop just past the last element (start + count * step
    // would overflow here).
    tensor g = zeros({1});
    g.requires_grad_(true);
    const tensor out = slice_backward(g, {5}, 0, 3, big);
    CHECK(out.shape() == shape_type{5});
    const auto grads = xgrad::grad({sum(out)}, {g});
    CHECK(grads[0].shape() == shape_type{1});
}

TEST_CASE("concat: extents that sum past int64 are reported")
{
    const tensor a = expand(zeros({1, 1}), {1, big - 1});
    const tensor b = expand(zeros({1, 1}), {1, 2});
    CHECK_ERROR(concat({a, b}, 1), xgrad::invalid_argument, "concat", "overflows");
}

TEST_CASE("unfold2d of a zero-channel input with a huge output gives an empty cols")
{
    // The cols strides would be products such as KH * KW * (N * OH * OW): 4 * ~2^62.
    const tensor x = zeros({1, 0, p31, p31});
    window2d w;
    w.kernel = {2, 2};
    const tensor cols = unfold2d(x, w);
    CHECK(cols.shape() == shape_type{0, (p31 - 1) * (p31 - 1)});
    const tensor cl = unfold2d(zeros({1, p31, p31, 0}), w, "NHWC");
    CHECK(cl.shape() == shape_type{(p31 - 1) * (p31 - 1), 0});
    // Its adjoint on the same geometry.
    CHECK(fold2d(cols, {1, 0, p31, p31}, w).shape() == shape_type{1, 0, p31, p31});
}

TEST_CASE("unfold2d, avg_pool2d and max_pool2d of an empty input do not size scratch by the kernel")
{
    const address_space_limit limit;
    // A 2^31 - 1 wide kernel over an empty batch: tap tables of that size would be 32 GiB.
    const tensor x = zeros({0, 1, 1, int32_max});
    window2d w;
    w.kernel = {1, int32_max};
    CHECK(unfold2d(x, w).shape() == shape_type{int32_max, 0});
    CHECK(unfold2d(zeros({0, 1, int32_max, 1}), window2d{{int32_max, 1}, {1, 1}, {0, 0}, {1, 1}}).shape() ==
          shape_type{int32_max, 0});
    CHECK(avg_pool2d(x, pool({1, int32_max})).shape() == shape_type{0, 1, 1, 1});
    pool2d_params exclude = pool({1, int32_max});
    exclude.count_include_pad = false; // whose divisor would unfold a plane of 2^31 ones
    CHECK(avg_pool2d(x, exclude).shape() == shape_type{0, 1, 1, 1});
    CHECK(avg_pool2d(zeros({0, 1, int32_max, 1}), exclude, "NHWC").shape() == shape_type{0, 1, 1, 1});
    // max_pool2d's per-row table is sized by the output height: 2^31 rows of an empty batch.
    CHECK(max_pool2d(zeros({0, 1, p31, 1}), pool({1, 1})).shape() == shape_type{0, 1, p31, 1});
    CHECK(max_pool2d(zeros({1, 0, p31, 1}), pool({1, 1})).shape() == shape_type{1, 0, p31, 1});
    // And its gradient, whose kernel (max_pool2d_grad: these windows do not overlap) has
    // per-row and per-column tables sized by the input: none is made for an empty one.
    for (const shape_type& shape : {shape_type{0, 1, p31, 1}, shape_type{1, 0, p31, 1}})
    {
        const tensor x = zeros(shape).requires_grad_(true);
        const tensor dx = xgrad::grad({sum(max_pool2d(x, pool({1, 1})))}, {x})[0];
        CHECK(dx.shape() == shape);
    }
}

TEST_CASE("conv2d over an empty batch with an output plane past int64 computes nothing, in both directions")
{
    const address_space_limit limit;
    // N * L * K is bounded for a non-empty batch only: here OH * OW = 2^80 would overflow, and
    // the weight's gradient is the zero sum over no images.
    for (const char* format : {"NCHW", "NHWC"})
    {
        INFO(format);
        const bool cl = std::string(format) == "NHWC";
        const tensor x = zeros(cl ? shape_type{0, p40, p40, 2} : shape_type{0, 2, p40, p40}).requires_grad_();
        const tensor w = ones({3, 2, 1, 1}).requires_grad_();
        const tensor b = ones({3}).requires_grad_();
        const tensor y = conv2d(x, w, b, {}, format);
        CHECK(y.shape() == (cl ? shape_type{0, p40, p40, 3} : shape_type{0, 3, p40, p40}));
        const auto g = grad({sum(y)}, {x, w, b});
        CHECK(g[0].shape() == x.shape());
        CHECK(to_vector(g[1]) == std::vector<double>(6, 0.0));
        CHECK(to_vector(g[2]) == std::vector<double>(3, 0.0));
    }
}

TEST_CASE("adaptive_avg_pool2d: huge output sizes are reported or cost nothing on an empty input")
{
    const address_space_limit limit;
    CHECK_ERROR(adaptive_avg_pool2d(zeros({1, 1, 3, 3}), {big, 1}), xgrad::invalid_argument, "adaptive_avg_pool2d",
                "output", "9223372036854775807", "overflows");
    CHECK_ERROR(adaptive_avg_pool2d(zeros({2, 3, 3, 3}), {big, 1}), xgrad::invalid_argument, "adaptive_avg_pool2d",
                "9223372036854775807", "overflows");
    CHECK_ERROR(adaptive_avg_pool2d(zeros({1, 3, 3, 2}), {big, 1}, "NHWC"), xgrad::invalid_argument,
                "adaptive_avg_pool2d", "overflows");
    // An empty batch: no cell to average, whatever output_size asks for.
    CHECK(adaptive_avg_pool2d(zeros({0, 1, 3, 3}), {p40, 1}).shape() == shape_type{0, 1, p40, 1});
    CHECK(adaptive_avg_pool2d(zeros({2, 0, 3, 3}), {big, 1}).shape() == shape_type{2, 0, big, 1});
    CHECK(adaptive_avg_pool2d(zeros({0, 3, 3, 1}), {p40, 2}, "NHWC").shape() == shape_type{0, p40, 2, 1});
    // The empty result still has the empty gradient.
    tensor x = zeros({0, 2, 3, 3});
    x.requires_grad_(true);
    const auto grads = xgrad::grad({sum(adaptive_avg_pool2d(x, {p40, 1}))}, {x});
    CHECK(grads[0].shape() == shape_type{0, 2, 3, 3});
}

TEST_CASE("pooling argument checks cost O(1) per axis, not one step per output row")
{
    // A stride-0 input 2^40 rows high whose width window lies entirely in padding: the
    // height must not be walked before the width is found wrong.
    const tensor tall = expand(zeros({1, 1, 1, 1}), {1, 1, p40, 1});
    pool2d_params p = pool({1, 2});
    p.padding = {0, 1};
    p.dilation = {1, 2};
    CHECK_ERROR(max_pool2d(tall, p), xgrad::invalid_argument, "max_pool2d", "window 0 along the width",
                "lies entirely in the padding");
    CHECK_ERROR(avg_pool2d(tall, p), xgrad::invalid_argument, "avg_pool2d", "lies entirely in the padding");
    const tensor wide = expand(zeros({1, 1, 1, 1}), {1, p40, 1, 1}); // NHWC: H = 2^40, W = 1
    CHECK_ERROR(max_pool2d(wide, p, "NHWC"), xgrad::invalid_argument, "max_pool2d", "lies entirely in the padding");
}

TEST_CASE("the O(1) padding check agrees with testing every window")
{
    // Every small geometry: the pools throw exactly when some window has no tap inside.
    int checked = 0;
    for (std::int64_t in = 0; in <= 6; ++in)
        for (std::int64_t k = 1; k <= 4; ++k)
            for (std::int64_t pad_ = 0; 2 * pad_ <= k; ++pad_)
                for (std::int64_t s = 1; s <= 3; ++s)
                    for (std::int64_t d = 1; d <= 4; ++d)
                    {
                        const std::int64_t span = d * (k - 1) + 1, padded = in + 2 * pad_;
                        if (padded < span)
                            continue; // an empty output, reported separately
                        const std::int64_t out = (padded - span) / s + 1;
                        bool all_reach = true;
                        for (std::int64_t o = 0; o < out; ++o)
                        {
                            bool reaches = false;
                            for (std::int64_t t = 0; t < k; ++t)
                            {
                                const std::int64_t pos = o * s - pad_ + t * d;
                                reaches = reaches || (pos >= 0 && pos < in);
                            }
                            all_reach = all_reach && reaches;
                        }
                        pool2d_params p;
                        p.kernel = {1, k};
                        p.stride = std::array<std::int64_t, 2>{1, s};
                        p.padding = {0, pad_};
                        p.dilation = {1, d};
                        bool threw = false;
                        try
                        {
                            (void)max_pool2d(zeros({1, 1, 1, in}), p);
                        }
                        catch (const xgrad::invalid_argument&)
                        {
                            threw = true;
                        }
                        CHECK_MESSAGE(threw == !all_reach, "in " << in << " kernel " << k << " padding " << pad_
                                                                 << " stride " << s << " dilation " << d);
                        ++checked;
                    }
    CHECK(checked > 250);
}

TEST_CASE("fold2d and conv2d's backward on a zero-width input kept non-empty by padding")
{
    // Input [1, 1, 2, 0] with padding 1 along the width: 2 x 2 windows, all padding.
    window2d w;
    w.kernel = {1, 1};
    w.padding = {0, 1};
    CHECK(unfold2d(zeros({1, 1, 2, 0}), w).shape() == shape_type{1, 4});
    CHECK(fold2d(ones({1, 4}), {1, 1, 2, 0}, w).shape() == shape_type{1, 1, 2, 0});
    CHECK(fold2d(ones({4, 1}), {1, 2, 0, 1}, w, "NHWC").shape() == shape_type{1, 2, 0, 1});

    tensor x = zeros({1, 1, 2, 0});
    x.requires_grad_(true);
    tensor weight = ones({1, 1, 1, 1});
    weight.requires_grad_(true);
    conv2d_params cp;
    cp.padding = {0, 1};
    const tensor y = conv2d(x, weight, tensor{}, cp);
    CHECK(y.shape() == shape_type{1, 1, 2, 2});
    const auto grads = xgrad::grad({sum(y)}, {x, weight});
    CHECK(grads[0].shape() == shape_type{1, 1, 2, 0});
    CHECK(to_vector(grads[1]) == std::vector<double>{0.0});
}

TEST_CASE("one_hot prints a bad label as the integer it is")
{
    const std::int64_t labels[3] = {0, big, 1};
    CHECK_ERROR(one_hot(from_host(labels, {3}, dtype::int64), 3), xgrad::invalid_argument, "one_hot",
                "label 9223372036854775807 at position 1", "outside [0, 3)");
    const std::int64_t near[1] = {(std::int64_t{1} << 53) + 1}; // not a double
    CHECK_ERROR(one_hot(from_host(near, {1}, dtype::int64), 2), xgrad::invalid_argument, "label 9007199254740993");
    const std::int64_t low[1] = {std::numeric_limits<std::int64_t>::min()};
    CHECK_ERROR(one_hot(from_host(low, {1}, dtype::int64), 2), xgrad::invalid_argument, "label -9223372036854775808");
}

TEST_CASE("checked size helpers")
{
    CHECK(checked_round_up(5, 4, "t") == 8);
    CHECK(checked_round_up(0, 512, "t") == 0);
    CHECK_ERROR(checked_round_up(SIZE_MAX - 3, 512, "size class"), xgrad::invalid_argument, "size class", "overflows");
    CHECK_ERROR(checked_round_up(static_cast<std::size_t>(big) - 2, 512, "size class"), xgrad::invalid_argument,
                "size class", "rounded up to 512");
    CHECK_ERROR(checked_bytes(big / 2, 4, "tensor bytes"), xgrad::invalid_argument, "tensor bytes", "overflows");
}

TEST_CASE("tensors whose byte count overflows are reported before any allocation")
{
    CHECK_ERROR(zeros({big / 2, 2}, dtype::float64), xgrad::invalid_argument, "needs more bytes", "float64");
    CHECK_ERROR(empty({p62}), xgrad::invalid_argument, "needs more bytes", "float32");
    CHECK_ERROR(full({big}, 1.0, dtype::float16), xgrad::invalid_argument, "needs more bytes");
}

TEST_CASE("factories check the bytes of their host staging buffer before allocating it")
{
    CHECK_ERROR(arange(0, 0x1p61), xgrad::invalid_argument, "arange", "elements", "overflows");
    generator gen(3);
    CHECK_ERROR(randn({std::int64_t{1} << 61}, gen), xgrad::invalid_argument, "randn", "overflows");
    CHECK_ERROR(rand({std::int64_t{1} << 61}, gen), xgrad::invalid_argument, "rand", "overflows");
    CHECK(arange(0, 3).shape() == shape_type{3});
}

TEST_CASE("mean of an empty tensor whose other reduced extents overflow together")
{
    const tensor m = mean(zeros({p40, p40, 0}));
    CHECK(m.shape() == shape_type{});
    CHECK(std::isnan(m.item()));
    CHECK(mean(zeros({p40, p40, 0, 2}), {0, 1, 2}).shape() == shape_type{2});
}

TEST_CASE("the window ops on a CUDA device handle empty operands as the CPU does")
{
    if (cuda_device_count() == 0)
        return; // no CUDA backend in this build (the XGRAD_CUDA_ON_CPU build runs this)
    const device dev = parse_device("cuda:0");
    const address_space_limit limit;
    window2d w;
    w.kernel = {1, int32_max};
    CHECK(unfold2d(zeros({0, 1, 1, int32_max}, dtype::float32, dev), w).shape() == shape_type{int32_max, 0});
    CHECK(max_pool2d(zeros({0, 1, p31, 1}, dtype::float32, dev), pool({1, 1})).shape() == shape_type{0, 1, p31, 1});
    window2d pw;
    pw.padding = {0, 1};
    CHECK(fold2d(ones({1, 4}, dtype::float32, dev), {1, 1, 2, 0}, pw).shape() == shape_type{1, 1, 2, 0});
    const tensor cols = unfold2d(zeros({1, 0, p31, p31}, dtype::float32, dev),
                                 window2d{{2, 2}, {1, 1}, {0, 0}, {1, 1}});
    CHECK(cols.shape() == shape_type{0, (p31 - 1) * (p31 - 1)});
    CHECK(adaptive_avg_pool2d(zeros({0, 1, 3, 3}, dtype::float32, dev), {p40, 1}).shape() == shape_type{0, 1, p40, 1});
    const tensor a = adaptive_avg_pool2d(ones({1, 2, 5, 3}, dtype::float32, dev), {3, 2});
    CHECK(to_vector(a) == std::vector<double>(12, 1.0));
}

TEST_CASE("printing an empty tensor with a huge extent is summarized")
{
    const std::string s = zeros({p40, 0}).to_string();
    CHECK(s.size() < 200);
    CHECK(s.find("...") != std::string::npos);
    CHECK(s.find("shape=[1099511627776, 0]") != std::string::npos);
    // Its contiguous strides would not fit int64 (they are all 1); it has no element to index.
    const std::string e = expand(zeros({1, 1, 1}), {0, p40, p40}).to_string();
    CHECK(e.find("shape=[0, 1099511627776, 1099511627776]") != std::string::npos);
}

TEST_CASE("elementwise ops, reductions and copies of an empty tensor with huge extents")
{
    const tensor e = zeros({p40, p40, 0});
    CHECK(add(e, scalar_like(e, 1.0)).shape() == e.shape());
    CHECK(mul(e, e).shape() == e.shape());
    CHECK(exp(e).shape() == e.shape());
    CHECK(sum(e, {0, 1}).shape() == shape_type{0});
    CHECK(max(e, {0, 1}).shape() == shape_type{0});
    CHECK(contiguous(permute(e, {2, 0, 1})).shape() == shape_type{0, p40, p40});
    CHECK(cast(e, dtype::float64).shape() == e.shape());
    CHECK(slice(e, 0, 1, p40, 3).shape() == shape_type{(p40 - 2) / 3 + 1, p40, 0});
    CHECK_ERROR(sum(e, {2}), xgrad::invalid_argument, "[1099511627776, 1099511627776]", "too many elements");
}
