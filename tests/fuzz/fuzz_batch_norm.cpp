// Fuzz target: the fused batch-norm ops (xgrad/ops/batch_norm.hpp) and their TensorFlow-shaped
// classes (xgrad/compat/tensorflow.hpp).
//
// Input layout (fuzz_input.hpp reads past the end as zeros): an op selector, dtypes, the
// data_format (one of the four, or a bad one), the rank and extents of x (small, so at most
// fuzz::max_elements elements, now and then a zero extent), per-channel tensors of length C or
// of a wrong length / rank / dtype / undefined, the attributes (epsilon and
// exponential_avg_factor from a table with negative, NaN and Inf values) and the values of the
// tensors (with Inf and NaN).
//
// The ReLU forward's inputs go on to the ReLU + max-pool fusion with window parameters read
// after everything else.
//
// Checks beyond "no crash": a successful forward returns y of x's shape and dtype and per-
// channel outputs of length C; in training with float32/float64 x, a channel's batch mean is
// NaN exactly when the exact mean of its values is (an Inf input gives an Inf mean, not NaN).
#include <cmath>
#include <string>
#include <vector>

#include "tests/fuzz/fuzz_input.hpp"
#include "xgrad/autograd.hpp"
#include "xgrad/compat/tensorflow.hpp"
#include "xgrad/ops/batch_norm.hpp"
#include "xgrad/ops/pool.hpp"

namespace
{
    using namespace xgrad;
    using fuzz::fuzz_input;
    constexpr const char* target = "batch_norm";

    namespace tf = xgrad::compat::tensorflow;

    bool channels_last(const std::string& f) { return f == "NHWC" || f == "NDHWC"; }

    struct request
    {
        batch_norm_attrs attrs;
        shape_type x_shape;
        std::int64_t channels = 0;
        dtype x_dtype = dtype::float32;
        dtype stat_dtype = dtype::float32;
    };

    std::string pick_format(fuzz_input& in)
    {
        static const char* formats[] = {"NHWC", "NCHW", "NDHWC", "NCDHW", "NHWC", "NCHW", "", "nchw", "NCW"};
        return formats[in.choice(sizeof formats / sizeof formats[0])];
    }

    float pick_float(fuzz_input& in, float usual)
    {
        if (in.byte() < 160)
            return usual;
        return static_cast<float>(in.real());
    }

    /// A per-channel tensor: usually [C] of the statistics dtype, sometimes a wrong one.
    tensor per_channel(fuzz_input& in, const request& r)
    {
        const std::uint8_t b = in.byte();
        shape_type shape{r.channels};
        dtype dt = r.stat_dtype;
        if (b >= 200)
        {
            switch (b % 6)
            {
            case 0: return tensor(); // undefined
            case 1: shape = {r.channels + 1}; break;
            case 2: shape = {r.channels > 0 ? r.channels - 1 : 0}; break;
            case 3: shape = {1, r.channels}; break;
            case 4: dt = in.floating_dtype(); break;
            default: shape = {0}; break;
            }
        }
        if (!fuzz::fits(shape))
            return tensor();
        return fuzz::make_tensor(in, shape, dt);
    }

    /// An x-like tensor: x's shape and dtype, or now and then another shape or dtype.
    tensor x_like(fuzz_input& in, const request& r)
    {
        shape_type shape = r.x_shape;
        dtype dt = r.x_dtype;
        const std::uint8_t b = in.byte();
        if (b >= 220 && !shape.empty())
            shape[b % shape.size()] += 1;
        else if (b >= 210)
            dt = in.floating_dtype();
        if (!fuzz::fits(shape))
            return tensor();
        return fuzz::make_tensor(in, shape, dt);
    }

    /// The forward's checks: output shapes, and a batch mean that is NaN only where the exact
    /// mean is.
    void check_forward(const request& r, const tensor& x, const batch_norm_forward_result& out, bool relu)
    {
        XGRAD_FUZZ_CHECK(target, out.y.shape() == x.shape(),
                         "y " + fuzz::shape_string(out.y.shape()) + " vs x " + fuzz::shape_string(x.shape()));
        XGRAD_FUZZ_CHECK(target, out.y.dtype() == x.dtype(), "y dtype");
        if (!r.attrs.is_training || r.channels == 0 || x.numel() == 0)
            return;
        XGRAD_FUZZ_CHECK(target, out.saved_mean.numel() == r.channels, "saved_mean length");
        if (x.dtype() != dtype::float32 && x.dtype() != dtype::float64)
            return;
        // The exact per-channel mean's class (NaN, or not) from the values in long double.
        const std::vector<double> xs = to_vector(x);
        const std::vector<double> mean = to_vector(out.saved_mean);
        const std::int64_t c_axis = channels_last(r.attrs.data_format) ? x.dim() - 1 : 1;
        std::int64_t inner = 1;
        for (std::int64_t d = c_axis + 1; d < x.dim(); ++d)
            inner *= x.shape()[static_cast<std::size_t>(d)];
        std::vector<long double> sum(static_cast<std::size_t>(r.channels), 0.0L);
        for (std::size_t i = 0; i < xs.size(); ++i)
        {
            const std::size_t c = (i / static_cast<std::size_t>(inner)) % static_cast<std::size_t>(r.channels);
            sum[c] += xs[i];
        }
        const long double count = static_cast<long double>(xs.size()) / static_cast<long double>(r.channels);
        for (std::size_t c = 0; c < sum.size(); ++c)
        {
            const long double exact = sum[c] / count;
            XGRAD_FUZZ_CHECK(target, std::isnan(exact) == std::isnan(mean[c]),
                             std::string(relu ? "fused_batch_norm_relu" : "fused_batch_norm") + " (" +
                                 std::string(name(x.dtype())) + ", x " + fuzz::shape_string(x.shape()) + " " +
                                 r.attrs.data_format + "): channel " + std::to_string(c) + " batch mean " +
                                 std::to_string(mean[c]) + " but the exact mean is " +
                                 std::to_string(static_cast<double>(exact)));
        }
    }

    void run(fuzz_input& in)
    {
        request r;
        const std::size_t op = in.choice(11);
        r.x_dtype = in.floating_dtype();
        r.stat_dtype = r.x_dtype == dtype::float64 ? dtype::float64 : dtype::float32;
        if (in.byte() >= 240)
            r.stat_dtype = in.floating_dtype();
        r.attrs.data_format = pick_format(in);
        r.attrs.is_training = in.boolean();
        r.attrs.epsilon = pick_float(in, 0.001f);
        r.attrs.exponential_avg_factor = pick_float(in, in.boolean() ? 1.0f : 0.25f);

        std::size_t rank = r.attrs.data_format.size() == 5 ? 5 : 4;
        if (in.byte() >= 240)
            rank = in.choice(7);
        for (std::size_t d = 0; d < rank; ++d)
            r.x_shape.push_back(in.integer(4));
        if (!fuzz::fits(r.x_shape))
            return;
        if (rank >= 2)
            r.channels = r.x_shape[channels_last(r.attrs.data_format) ? rank - 1 : 1];
        if (!fuzz::fits({r.channels + 1}))
            return;

        const tensor x = fuzz::make_tensor(in, r.x_shape, r.x_dtype);
        const tensor scale = per_channel(in, r);
        const tensor offset = per_channel(in, r);
        const tensor mean = per_channel(in, r);
        const tensor variance = per_channel(in, r);

        switch (op)
        {
        case 0:
        case 1:
        {
            const bool relu = op == 1;
            batch_norm_forward_result out;
            if (fuzz::attempt([&] {
                    out = relu ? fused_batch_norm_relu(x, scale, offset, mean, variance, r.attrs)
                               : fused_batch_norm(x, scale, offset, mean, variance, r.attrs);
                }))
                check_forward(r, x, out, relu);
            // Then, from bytes past the ones above (so earlier inputs keep their meaning), the
            // ReLU forward followed by max pooling, as one op, with window parameters from the
            // table (0, negative and huge included); its pooled y must be max_pool2d's shape.
            if (relu && in.boolean())
            {
                pool2d_params p;
                p.kernel = {in.integer_in(-1, 4), in.integer_in(-1, 4)};
                if (in.boolean())
                    p.stride = std::array<std::int64_t, 2>{in.integer_in(-1, 4), in.integer_in(-1, 4)};
                p.padding = {in.integer_in(-1, 2), in.integer_in(-1, 2)};
                p.dilation = {in.integer_in(0, 2), in.integer_in(0, 2)};
                fuzz::attempt([&] {
                    const auto pooled = fused_batch_norm_relu_max_pool2d(x, scale, offset, mean, variance, r.attrs, p);
                    const tensor want = max_pool2d(x, p, r.attrs.data_format); // the pool's shape rules
                    XGRAD_FUZZ_CHECK(target, pooled.y.shape() == want.shape() && pooled.y.dtype() == x.dtype(),
                                     "fused_batch_norm_relu_max_pool2d y shape or dtype");
                });
            }
            break;
        }
        case 2:
        case 3:
        {
            const tensor dy = x_like(in, r);
            // A third statistics tensor (TensorFlow's reserve_space_3, which V3 ignores): drawn
            // still, so that the inputs after it decode as before; op 3 passes it to V3.
            const tensor rs3 = in.boolean() ? tensor() : per_channel(in, r);
            fuzz::attempt([&] {
                if (op == 2)
                {
                    const auto g = fused_batch_norm_grad(dy, x, scale, mean, variance, r.attrs);
                    XGRAD_FUZZ_CHECK(target, g.dx.shape() == x.shape(), "dx shape");
                    return;
                }
                const auto attrs = tf::ops::FusedBatchNormGradV3::Attrs()
                                       .Epsilon(r.attrs.epsilon)
                                       .DataFormat(r.attrs.data_format)
                                       .IsTraining(r.attrs.is_training);
                const tf::ops::FusedBatchNormGradV3 g(tf::Scope::NewRootScope(), dy, x, scale, mean, variance, rs3,
                                                      attrs);
                XGRAD_FUZZ_CHECK(target, g.x_backprop.shape() == x.shape(), "x_backprop shape");
            });
            break;
        }
        case 4:
        {
            const tensor dy = x_like(in, r);
            const tensor y = x_like(in, r);
            fuzz::attempt([&] { fused_batch_norm_relu_grad(dy, x, y, scale, mean, variance, r.attrs); });
            break;
        }
        case 5:
        {
            // The two phases, with a count from the table (0, negative and huge included).
            const tensor dy = x_like(in, r);
            const std::int64_t count = in.integer(64);
            fuzz::attempt([&] {
                const batch_norm_grad_sums sums = batch_norm_grad_reduce(dy, x, mean, r.attrs);
                batch_norm_grad_apply(dy, x, scale, mean, variance, sums, count, r.attrs);
            });
            // Sums of a wrong length or dtype.
            batch_norm_grad_sums bad{per_channel(in, r), per_channel(in, r)};
            fuzz::attempt([&] { batch_norm_grad_apply(dy, x, scale, mean, variance, bad, count, r.attrs); });
            break;
        }
        case 6:
        {
            const tensor dy = x_like(in, r);
            const tensor A = x_like(in, r);
            const tensor a = per_channel(in, r);
            const tensor b = per_channel(in, r);
            fuzz::attempt([&] { fused_batch_norm_grad_grad(A, a, b, dy, x, scale, mean, variance, r.attrs); });
            break;
        }
        case 7:
        {
            // Autograd through the forward, then the gradient op's own backward.
            fuzz::attempt([&] {
                tensor xl = x.detach();
                tensor sl = scale.defined() ? scale.detach() : scale;
                if (is_floating(xl.dtype()))
                    xl.requires_grad_();
                if (sl.defined() && is_floating(sl.dtype()))
                    sl.requires_grad_();
                const auto out = fused_batch_norm(xl, sl, offset, mean, variance, r.attrs);
                out.y.backward(ones_like(out.y), false, true);
                // A gradient made with create_graph refers to the graph that refers to the
                // leaf (as in PyTorch): clearing it breaks that cycle.
                xl.zero_grad();
                if (sl.defined())
                    sl.zero_grad();
            });
            break;
        }
        case 8:
        {
            const tf::Scope scope = tf::Scope::NewRootScope().WithGradientRecording(in.boolean());
            const auto attrs = tf::ops::FusedBatchNormV3::Attrs()
                                   .Epsilon(r.attrs.epsilon)
                                   .ExponentialAvgFactor(r.attrs.exponential_avg_factor)
                                   .DataFormat(r.attrs.data_format)
                                   .IsTraining(r.attrs.is_training);
            fuzz::attempt([&] {
                tf::ops::FusedBatchNormV3 bn(scope, x, scale, offset, mean, variance, attrs);
                XGRAD_FUZZ_CHECK(target, bn.y.shape() == x.shape(), "FusedBatchNormV3 y shape");
            });
            break;
        }
        case 9:
        case 10:
        {
            const tf::Scope scope = tf::Scope::NewRootScope();
            const tensor dy = x_like(in, r);
            const auto attrs = tf::ops::FusedBatchNormGradV3::Attrs()
                                   .Epsilon(r.attrs.epsilon)
                                   .DataFormat(r.attrs.data_format)
                                   .IsTraining(r.attrs.is_training);
            fuzz::attempt([&] {
                if (op == 9)
                    tf::ops::FusedBatchNormGradV3 g(scope, dy, x, scale, mean, variance, offset, attrs);
                else
                    tf::ops::FusedBatchNormGradV2 g(scope, dy, x, scale, mean, variance, attrs);
            });
            break;
        }
        default: break;
        }
    }
}

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size)
{
    fuzz_input in(data, size);
    try
    {
        run(in);
    }
    catch (const std::invalid_argument&)
    {
        // Bad input rejected while the target built its request (e.g. a cast): expected.
    }
    return 0;
}
