// batch_norm2d / batch_norm3d (see batch_norm.hpp): options, parameters and buffers around one
// call of xgrad::fused_batch_norm (or fused_batch_norm_relu for forward_relu). No backward is
// written here: the op's node differentiates y.
#include "xgrad/nn/batch_norm.hpp"

#include "batch_norm_checks.hpp"

#include <cmath>
#include <sstream>
#include <string>

#include "xgrad/autograd.hpp"
#include "xgrad/factories.hpp"
#include "xgrad/ops/batch_norm.hpp"

namespace xgrad::nn
{
    namespace
    {
        /// "[N, C, H, W]" for "NCHW": the dimensions a data_format names, in order.
        std::string layout_string(const std::string& data_format)
        {
            std::string s = "[";
            for (std::size_t i = 0; i < data_format.size(); ++i)
                s += (i ? ", " : "") + std::string(1, data_format[i]);
            return s + "]";
        }

        std::string quoted(const std::string& s) { return "\"" + s + "\""; }
    }

    // --- shared with sync_batch_norm2d (batch_norm_checks.hpp) ---------------------------------

    std::string detail::check_batch_norm_options(batch_norm_options& options, std::int64_t rank)
    {
        const std::string first = rank == 4 ? "NCHW" : "NCDHW", last = rank == 4 ? "NHWC" : "NDHWC";
        std::string& format = options.data_format;
        if (format.empty())
            format = first;
        if (format != first && format != last)
            return "data_format must be " + quoted(first) + " or " + quoted(last) + ", got " + quoted(format);
        if (options.num_features < 1)
            return "num_features must be at least 1, got " + std::to_string(options.num_features);
        if (!std::isfinite(options.eps) || options.eps < 0)
            return "eps must be finite and >= 0, got " + std::to_string(options.eps);
        if (options.momentum && (!std::isfinite(*options.momentum) || *options.momentum < 0 || *options.momentum > 1))
            return "momentum must be in [0, 1] (or nullopt for a cumulative average), got " +
                   std::to_string(*options.momentum);
        const xgrad::dtype dt = options.dtype;
        if (dt != xgrad::dtype::float32 && dt != xgrad::dtype::float64)
            return "the parameter dtype must be float32 or float64, got " + std::string(xgrad::name(dt));
        return {};
    }

    std::int64_t detail::batch_norm_channel_dim(const batch_norm_options& options, std::int64_t rank)
    {
        return options.data_format == (rank == 4 ? "NHWC" : "NDHWC") ? rank - 1 : 1;
    }

    std::string detail::check_batch_norm_input(const tensor& x, const batch_norm_options& options, std::int64_t rank,
                                               std::int64_t channel_dim)
    {
        const std::string& format = options.data_format;
        if (!x.defined())
            return "the input is an undefined tensor";
        if (x.dim() != rank)
            return "expected a rank-" + std::to_string(rank) + " input " + layout_string(format) + " (data_format " +
                   format + "), got shape " + shape_to_string(x.shape());
        const std::int64_t channels = x.size(channel_dim);
        if (channels != options.num_features)
            return "expected " + std::to_string(options.num_features) + " channels in dimension " +
                   std::to_string(channel_dim) + " of " + layout_string(format) + " (data_format " + format +
                   "), got an input of shape " + shape_to_string(x.shape()) + " with " + std::to_string(channels);
        const xgrad::dtype xdt = x.dtype(), pdt = options.dtype;
        if (!is_floating(xdt))
            return "the input must be floating point, got dtype " + std::string(xgrad::name(xdt));
        const xgrad::dtype want = xdt == xgrad::dtype::float64 ? xgrad::dtype::float64 : xgrad::dtype::float32;
        if (pdt != want)
            return "an input of dtype " + std::string(xgrad::name(xdt)) + " needs " + std::string(xgrad::name(want)) +
                   " parameters, but the layer's are " + std::string(xgrad::name(pdt)) + " (options.dtype)";
        if (x.device() != options.device)
            return "the input is on " + to_string(x.device()) + " but the layer's tensors are on " +
                   to_string(options.device);
        return {};
    }

    float detail::batch_norm_update_factor(const batch_norm_options& options, std::int64_t batches)
    {
        return options.momentum ? *options.momentum : static_cast<float>(1.0 / static_cast<double>(batches));
    }

    std::string detail::describe_batch_norm(std::string_view name, const batch_norm_options& options,
                                            const std::string& extra)
    {
        std::ostringstream s;
        s << name << "(" << options.num_features << ", eps=" << options.eps << ", momentum=";
        if (options.momentum)
            s << *options.momentum;
        else
            s << "cumulative";
        if (!options.affine)
            s << ", affine=false";
        if (!options.track_running_stats)
            s << ", track_running_stats=false";
        s << ", " << options.data_format;
        if (!extra.empty())
            s << ", " << extra;
        s << ")";
        return s.str();
    }

    batch_norm_base::batch_norm_base(options_type options, std::int64_t rank, std::string_view name)
        : m_options(std::move(options)), m_rank(rank), m_name(name)
    {
        const std::string problem = detail::check_batch_norm_options(m_options, rank);
        if (!problem.empty())
            fail(problem);
        m_channel_dim = detail::batch_norm_channel_dim(m_options, rank);
        const xgrad::dtype dt = m_options.dtype;

        const shape_type c{m_options.num_features};
        const xgrad::device dev = m_options.device;
        if (m_options.affine)
        {
            register_parameter("weight", ones(c, dt, dev));
            register_parameter("bias", zeros(c, dt, dev));
        }
        else
        {
            m_unit_scale = ones(c, dt, dev);
            m_zero_offset = zeros(c, dt, dev);
        }
        if (m_options.track_running_stats)
        {
            register_buffer("running_mean", zeros(c, dt, dev));
            register_buffer("running_var", ones(c, dt, dev));
            register_buffer("num_batches_tracked", zeros({}, xgrad::dtype::int64, dev));
        }
        m_no_stats = zeros({0}, dt, dev);
    }

    void batch_norm_base::moved_to(xgrad::device dev)
    {
        m_options.device = dev;
        if (m_unit_scale.defined())
            m_unit_scale = m_unit_scale.to(dev);
        if (m_zero_offset.defined())
            m_zero_offset = m_zero_offset.to(dev);
        m_no_stats = m_no_stats.to(dev);
    }

    tensor batch_norm_base::weight() const { return m_options.affine ? parameter("weight") : tensor(); }
    tensor batch_norm_base::bias() const { return m_options.affine ? parameter("bias") : tensor(); }
    tensor batch_norm_base::running_mean() const
    {
        return m_options.track_running_stats ? buffer("running_mean") : tensor();
    }
    tensor batch_norm_base::running_var() const
    {
        return m_options.track_running_stats ? buffer("running_var") : tensor();
    }
    tensor batch_norm_base::num_batches_tracked() const
    {
        return m_options.track_running_stats ? buffer("num_batches_tracked") : tensor();
    }

    void batch_norm_base::reset_running_stats()
    {
        if (!m_options.track_running_stats)
            return;
        const shape_type c{m_options.num_features};
        set_buffer("running_mean", zeros(c, m_options.dtype, m_options.device));
        set_buffer("running_var", ones(c, m_options.dtype, m_options.device));
        set_buffer("num_batches_tracked", zeros({}, xgrad::dtype::int64, m_options.device));
    }

    void batch_norm_base::reset_parameters()
    {
        reset_running_stats();
        if (!m_options.affine)
            return;
        const shape_type c{m_options.num_features};
        set_parameter("weight", ones(c, m_options.dtype, m_options.device));
        set_parameter("bias", zeros(c, m_options.dtype, m_options.device));
    }

    void batch_norm_base::check_input(const tensor& x) const
    {
        const std::string problem = detail::check_batch_norm_input(x, m_options, m_rank, m_channel_dim);
        if (!problem.empty())
            fail(problem);
    }

    tensor batch_norm_base::effective_scale() const { return m_options.affine ? scale() : m_unit_scale; }
    tensor batch_norm_base::effective_offset() const { return m_options.affine ? offset() : m_zero_offset; }

    std::string batch_norm_base::describe() const { return detail::describe_batch_norm(m_name, m_options); }

    std::string batch_norm_base::describe_with(const std::string& extra) const
    {
        return detail::describe_batch_norm(m_name, m_options, extra);
    }

    double batch_norm_base::update_factor(std::int64_t batches) const
    {
        return detail::batch_norm_update_factor(m_options, batches);
    }

    tensor batch_norm_base::forward(const tensor& x) { return run(x, false); }

    tensor batch_norm_base::forward_relu(const tensor& x) { return run(x, true); }

    tensor batch_norm_base::run(const tensor& x, bool relu) { return run_impl(x, relu, nullptr); }

    tensor batch_norm_base::run_relu_max_pool(const tensor& x, const pool2d_params& pool)
    {
        return run_impl(x, true, &pool);
    }

    tensor batch_norm_base::run_impl(const tensor& x, bool relu, const pool2d_params* pool)
    {
        check_input(x);
        const bool track = m_options.track_running_stats;
        const bool batch_stats = is_training() || !track; // normalise with the batch's statistics
        const bool update = is_training() && track;       // and fold them into the running ones
        const std::int64_t values_per_channel = x.numel() / m_options.num_features;
        if (batch_stats && values_per_channel == 1)
            fail("expected more than 1 value per channel to compute batch statistics, got an input of shape " +
                 shape_to_string(x.shape()));

        batch_norm_attrs attrs;
        attrs.epsilon = m_options.eps;
        attrs.data_format = m_options.data_format;
        attrs.is_training = batch_stats;
        std::int64_t batches = 0;
        if (update)
        {
            batches = num_batches_tracked().item<std::int64_t>() + 1;
            attrs.exponential_avg_factor = detail::batch_norm_update_factor(m_options, batches);
        }
        const tensor sc = effective_scale();
        const tensor oc = effective_offset();
        const tensor mean = track ? running_mean() : m_no_stats;
        const tensor variance = track ? running_var() : m_no_stats;

        const batch_norm_forward_result r = pool   ? fused_batch_norm_relu_max_pool2d(x, sc, oc, mean, variance, attrs,
                                                                                      *pool)
                                            : relu ? fused_batch_norm_relu(x, sc, oc, mean, variance, attrs)
                                                   : fused_batch_norm(x, sc, oc, mean, variance, attrs);
        if (update && values_per_channel > 0)
        {
            no_grad guard;
            set_buffer("running_mean", r.running_mean);
            set_buffer("running_var", r.running_var);
            set_buffer("num_batches_tracked",
                       full({}, static_cast<double>(batches), xgrad::dtype::int64, m_options.device));
        }
        return r.y;
    }
}
