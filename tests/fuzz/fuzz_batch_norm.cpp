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

    /// The tensors every op is given: x and the four per-channel tensors.
    struct inputs
    {
        tensor x, scale, offset, mean, variance;
    };

    /// Reads the request after the op selector: dtypes, format, attributes and x's shape.
    /// Returns false when x or the per-channel tensors would be too large to make.
    bool read_request(fuzz_input& in, request& r)
    {
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
            return false;
        if (rank >= 2)
            r.channels = r.x_shape[channels_last(r.attrs.data_format) ? rank - 1 : 1];
        if (!fuzz::fits({r.channels + 1}))
            return false;
        return true;
    }

    /// Ops 0 and 1: the forward (with ReLU when `relu`), then the ReLU + max-pool fusion.
    void run_forward(fuzz_input& in, const request& r, const inputs& t, bool relu)
    {
        batch_norm_forward_result out;
        if (fuzz::attempt([&] {
                out = relu ? fused_batch_norm_relu(t.x, t.scale, t.offset, t.mean, t.variance, r.attrs)
                           : fused_batch_norm(t.x, t.scale, t.offset, t.mean, t.variance, r.attrs);
            }))
            check_forward(r, t.x, out, relu);
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
                const auto pooled = fused_batch_norm_relu_max_pool2d(t.x, t.scale, t.offset, t.mean, t.variance,
                                                                     r.attrs, p);
                const tensor want = max_pool2d(t.x, p, r.attrs.data_format); // the pool's shape rules
                XGRAD_FUZZ_CHECK(target, pooled.y.shape() == want.shape() && pooled.y.dtype() == t.x.dtype(),
                                 "fused_batch_norm_relu_max_pool2d y shape or dtype");
            });
        }
    }

    /// Ops 2 and 3: the gradient, directly (op 2) or through FusedBatchNormGradV3 (op 3).
    void run_grad(fuzz_input& in, const request& r, const inputs& t, std::size_t op)
    {
        const tensor dy = x_like(in, r);
        // A third statistics tensor (TensorFlow's reserve_space_3, which V3 ignores): drawn
        // still, so that the inputs after it decode as before; op 3 passes it to V3.
        const tensor rs3 = in.boolean() ? tensor() : per_channel(in, r);
        fuzz::attempt([&] {
            if (op == 2)
            {
                const auto g = fused_batch_norm_grad(dy, t.x, t.scale, t.mean, t.variance, r.attrs);
                XGRAD_FUZZ_CHECK(target, g.dx.shape() == t.x.shape(), "dx shape");
                return;
            }
            const auto attrs = tf::ops::FusedBatchNormGradV3::Attrs()
                                   .Epsilon(r.attrs.epsilon)
                                   .DataFormat(r.attrs.data_format)
                                   .IsTraining(r.attrs.is_training);
            const tf::ops::FusedBatchNormGradV3 g(tf::Scope::NewRootScope(), dy, t.x, t.scale, t.mean, t.variance, rs3,
                                                  attrs);
            XGRAD_FUZZ_CHECK(target, g.x_backprop.shape() == t.x.shape(), "x_backprop shape");
        });
    }

    /// Op 4: the ReLU forward's gradient.
    void run_relu_grad(fuzz_input& in, const request& r, const inputs& t)
    {
        const tensor dy = x_like(in, r);
        const tensor y = x_like(in, r);
        fuzz::attempt([&] { fused_batch_norm_relu_grad(dy, t.x, y, t.scale, t.mean, t.variance, r.attrs); });
    }

    /// Op 5: the two phases, with a count from the table (0, negative and huge included).
    void run_grad_phases(fuzz_input& in, const request& r, const inputs& t)
    {
        const tensor dy = x_like(in, r);
        const std::int64_t count = in.integer(64);
        fuzz::attempt([&] {
            const batch_norm_grad_sums sums = batch_norm_grad_reduce(dy, t.x, t.mean, r.attrs);
            batch_norm_grad_apply(dy, t.x, t.scale, t.mean, t.variance, sums, count, r.attrs);
        });
        // Sums of a wrong length or dtype.
        batch_norm_grad_sums bad{per_channel(in, r), per_channel(in, r)};
        fuzz::attempt([&] { batch_norm_grad_apply(dy, t.x, t.scale, t.mean, t.variance, bad, count, r.attrs); });
    }

    /// Op 6: the second-order gradient.
    void run_grad_grad(fuzz_input& in, const request& r, const inputs& t)
    {
        const tensor dy = x_like(in, r);
        const tensor A = x_like(in, r);
        const tensor a = per_channel(in, r);
        const tensor b = per_channel(in, r);
        fuzz::attempt([&] { fused_batch_norm_grad_grad(A, a, b, dy, t.x, t.scale, t.mean, t.variance, r.attrs); });
    }

    /// Op 7: autograd through the forward, then the gradient op's own backward.
    void run_autograd(const request& r, const inputs& t)
    {
        fuzz::attempt([&] {
            tensor xl = t.x.detach();
            tensor sl = t.scale.defined() ? t.scale.detach() : t.scale;
            if (is_floating(xl.dtype()))
                xl.requires_grad_();
            if (sl.defined() && is_floating(sl.dtype()))
                sl.requires_grad_();
            const auto out = fused_batch_norm(xl, sl, t.offset, t.mean, t.variance, r.attrs);
            out.y.backward(ones_like(out.y), false, true);
            // A gradient made with create_graph refers to the graph that refers to the
            // leaf (as in PyTorch): clearing it breaks that cycle.
            xl.zero_grad();
            if (sl.defined())
                sl.zero_grad();
        });
    }

    /// Op 8: TensorFlow's FusedBatchNormV3, with or without gradient recording.
    void run_tf_forward(fuzz_input& in, const request& r, const inputs& t)
    {
        const tf::Scope scope = tf::Scope::NewRootScope().WithGradientRecording(in.boolean());
        const auto attrs = tf::ops::FusedBatchNormV3::Attrs()
                               .Epsilon(r.attrs.epsilon)
                               .ExponentialAvgFactor(r.attrs.exponential_avg_factor)
                               .DataFormat(r.attrs.data_format)
                               .IsTraining(r.attrs.is_training);
        fuzz::attempt([&] {
            tf::ops::FusedBatchNormV3 bn(scope, t.x, t.scale, t.offset, t.mean, t.variance, attrs);
            XGRAD_FUZZ_CHECK(target, bn.y.shape() == t.x.shape(), "FusedBatchNormV3 y shape");
        });
    }

    /// Ops 9 and 10: TensorFlow's FusedBatchNormGradV3 (op 9) and FusedBatchNormGradV2 (op 10).
    void run_tf_grad(fuzz_input& in, const request& r, const inputs& t, std::size_t op)
    {
        const tf::Scope scope = tf::Scope::NewRootScope();
        const tensor dy = x_like(in, r);
        const auto attrs = tf::ops::FusedBatchNormGradV3::Attrs()
                               .Epsilon(r.attrs.epsilon)
                               .DataFormat(r.attrs.data_format)
                               .IsTraining(r.attrs.is_training);
        fuzz::attempt([&] {
            if (op == 9)
                tf::ops::FusedBatchNormGradV3 g(scope, dy, t.x, t.scale, t.mean, t.variance, t.offset, attrs);
            else
                tf::ops::FusedBatchNormGradV2 g(scope, dy, t.x, t.scale, t.mean, t.variance, attrs);
        });
    }

    void run(fuzz_input& in)
    {
        request r;
        const std::size_t op = in.choice(11);
        if (!read_request(in, r))
            return;

        inputs t;
        t.x = fuzz::make_tensor(in, r.x_shape, r.x_dtype);
        t.scale = per_channel(in, r);
        t.offset = per_channel(in, r);
        t.mean = per_channel(in, r);
        t.variance = per_channel(in, r);

        switch (op)
        {
        case 0:
        case 1: run_forward(in, r, t, op == 1); break;
        case 2:
        case 3: run_grad(in, r, t, op); break;
        case 4: run_relu_grad(in, r, t); break;
        case 5: run_grad_phases(in, r, t); break;
        case 6: run_grad_grad(in, r, t); break;
        case 7: run_autograd(r, t); break;
        case 8: run_tf_forward(in, r, t); break;
        case 9:
        case 10: run_tf_grad(in, r, t, op); break;
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
