// batch_norm2d / batch_norm3d (see batch_norm.hpp): options, parameters and buffers around one
// call of xgrad::fused_batch_norm (or fused_batch_norm_relu for forward_relu). No backward is
// written here: the op's node differentiates y.
#include "xgrad/layers/batch_norm.hpp"

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

    batch_norm_base::batch_norm_base(options_type options, std::int64_t rank, std::string_view name)
        : m_options(std::move(options)), m_rank(rank), m_name(name)
    {
        const std::string first = rank == 4 ? "NCHW" : "NCDHW", last = rank == 4 ? "NHWC" : "NDHWC";
        std::string& format = m_options.data_format;
        if (format.empty())
            format = first;
        if (format != first && format != last)
            fail("data_format must be " + quoted(first) + " or " + quoted(last) + ", got " + quoted(format));
        m_channel_dim = format == last ? rank - 1 : 1;
        if (m_options.num_features < 1)
            fail("num_features must be at least 1, got " + std::to_string(m_options.num_features));
        if (!std::isfinite(m_options.eps) || m_options.eps < 0)
            fail("eps must be finite and >= 0, got " + std::to_string(m_options.eps));
        if (m_options.momentum &&
            (!std::isfinite(*m_options.momentum) || *m_options.momentum < 0 || *m_options.momentum > 1))
            fail("momentum must be in [0, 1] (or nullopt for a cumulative average), got " +
                 std::to_string(*m_options.momentum));
        const xgrad::dtype dt = m_options.dtype;
        if (dt != xgrad::dtype::float32 && dt != xgrad::dtype::float64)
            fail("the parameter dtype must be float32 or float64, got " + std::string(xgrad::name(dt)));

        const shape_type c{m_options.num_features};
        const xgrad::device dev = m_options.device;
        if (m_options.affine)
        {
            register_parameter("scale", ones(c, dt, dev));
            register_parameter("offset", zeros(c, dt, dev));
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

    tensor batch_norm_base::scale() const { return m_options.affine ? parameter("scale") : tensor(); }
    tensor batch_norm_base::offset() const { return m_options.affine ? parameter("offset") : tensor(); }
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
        set_parameter("scale", ones(c, m_options.dtype, m_options.device));
        set_parameter("offset", zeros(c, m_options.dtype, m_options.device));
    }

    void batch_norm_base::check_input(const tensor& x) const
    {
        const std::string& format = m_options.data_format;
        if (!x.defined())
            fail("the input is an undefined tensor");
        if (x.dim() != m_rank)
            fail("expected a rank-" + std::to_string(m_rank) + " input " + layout_string(format) + " (data_format " +
                 format + "), got shape " + shape_to_string(x.shape()));
        const std::int64_t channels = x.size(m_channel_dim);
        if (channels != m_options.num_features)
            fail("expected " + std::to_string(m_options.num_features) + " channels in dimension " +
                 std::to_string(m_channel_dim) + " of " + layout_string(format) + " (data_format " + format +
                 "), got an input of shape " + shape_to_string(x.shape()) + " with " + std::to_string(channels));
        const xgrad::dtype xdt = x.dtype(), pdt = m_options.dtype;
        if (!is_floating(xdt))
            fail("the input must be floating point, got dtype " + std::string(xgrad::name(xdt)));
        const xgrad::dtype want = xdt == xgrad::dtype::float64 ? xgrad::dtype::float64 : xgrad::dtype::float32;
        if (pdt != want)
            fail("an input of dtype " + std::string(xgrad::name(xdt)) + " needs " + std::string(xgrad::name(want)) +
                 " parameters, but the layer's are " + std::string(xgrad::name(pdt)) + " (options.dtype)");
        if (x.device() != m_options.device)
            fail("the input is on " + to_string(x.device()) + " but the layer's tensors are on " +
                 to_string(m_options.device));
    }

    std::string batch_norm_base::describe() const
    {
        std::ostringstream s;
        s << m_name << "(" << m_options.num_features << ", eps=" << m_options.eps << ", momentum=";
        if (m_options.momentum)
            s << *m_options.momentum;
        else
            s << "cumulative";
        if (!m_options.affine)
            s << ", affine=false";
        if (!m_options.track_running_stats)
            s << ", track_running_stats=false";
        s << ", " << m_options.data_format << ")";
        return s.str();
    }

    tensor batch_norm_base::forward(const tensor& x) { return run(x, false); }

    tensor batch_norm_base::forward_relu(const tensor& x) { return run(x, true); }

    tensor batch_norm_base::run(const tensor& x, bool relu)
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
            attrs.exponential_avg_factor = m_options.momentum ? *m_options.momentum
                                                              : static_cast<float>(1.0 / static_cast<double>(batches));
        }
        const tensor sc = m_options.affine ? scale() : m_unit_scale;
        const tensor oc = m_options.affine ? offset() : m_zero_offset;
        const tensor mean = track ? running_mean() : m_no_stats;
        const tensor variance = track ? running_var() : m_no_stats;

        const batch_norm_forward_result r = relu ? fused_batch_norm_relu(x, sc, oc, mean, variance, attrs)
                                                 : fused_batch_norm(x, sc, oc, mean, variance, attrs);
        if (update && values_per_channel > 0)
        {
            no_grad guard;
            set_buffer("running_mean", r.batch_mean);
            set_buffer("running_var", r.batch_variance);
            set_buffer("num_batches_tracked",
                       full({}, static_cast<double>(batches), xgrad::dtype::int64, m_options.device));
        }
        return r.y;
    }
}
