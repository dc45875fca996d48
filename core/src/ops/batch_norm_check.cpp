// Argument checks of the batch-norm ops: the contract's section 6, in its order, with
// TensorFlow's wording where it has one so that users porting code recognise the messages.
// Every check runs before any output is allocated or any data is read.
#include <cmath>
#include <string>
#include <vector>

#include "../detail.hpp"
#include "batch_norm_internal.hpp"
#include "xgrad/autograd.hpp"
#include "xgrad/factories.hpp"

namespace xgrad::detail
{
    namespace
    {
        [[noreturn]] void fail(const char* op, const std::string& what)
        {
            throw xgrad::invalid_argument(std::string(op) + ": " + what);
        }

        struct format_info
        {
            bool known = false, channels_last = true;
            std::int64_t rank = 4;
        };

        format_info format_of(const std::string& f)
        {
            if (f == "NHWC")
                return {true, true, 4};
            if (f == "NCHW")
                return {true, false, 4};
            if (f == "NDHWC")
                return {true, true, 5};
            if (f == "NCDHW")
                return {true, false, 5};
            return {};
        }

        void check_rank_4_or_5(const tensor& t, const char* name, const char* op)
        {
            if (t.dim() != 4 && t.dim() != 5)
                fail(op, std::string(name) + " must be 4 or 5-dimensional, got shape " + shape_to_string(t.shape()) +
                             " (input must be 4 or 5-dimensional)");
        }

        format_info check_format(const tensor& x, const batch_norm_attrs& attrs, bool v2, const char* op)
        {
            const format_info f = format_of(attrs.data_format);
            if (!f.known || (v2 && f.rank != 4))
                fail(op, "unsupported data_format '" + attrs.data_format + "' (" +
                             (v2 ? "NHWC or NCHW" : "NHWC, NCHW, NDHWC or NCDHW") + ")");
            if (x.dim() != f.rank)
                fail(op, "data_format " + attrs.data_format + " needs rank-" + std::to_string(f.rank) +
                             " tensors, got x of rank " + std::to_string(x.dim()) + " and shape " +
                             shape_to_string(x.shape()));
            return f;
        }

        void check_1d(const tensor& t, const char* name, const char* op)
        {
            if (!t.defined() || t.dim() != 1)
                fail(op, std::string(name) + " must be 1-dimensional, got shape " +
                             (t.defined() ? shape_to_string(t.shape()) : std::string("(undefined)")));
        }

        void check_length(const tensor& t, const char* name, std::int64_t C, const char* op, const char* prefix = "")
        {
            if (t.shape()[0] != C)
                fail(op, std::string(prefix) + name +
                             " must have the same number of elements as the channels of x, got " +
                             std::to_string(t.shape()[0]) + " and " + std::to_string(C));
        }

        void check_io_dtype(const tensor& x, const char* op)
        {
            const dtype d = x.dtype();
            if (d != dtype::float32 && d != dtype::float64 && d != dtype::float16 && d != dtype::bfloat16)
                fail(op, "x must be float16, bfloat16, float32 or float64, got " + std::string(name(d)));
        }

        void check_stats_dtype(const tensor& x, const tensor& t, const char* tname, const char* op)
        {
            const dtype want = batch_norm_stats_dtype(x.dtype());
            if (t.dtype() != want)
                fail(op, std::string(tname) + " has dtype " + std::string(name(t.dtype())) + " but x has dtype " +
                             std::string(name(x.dtype())) + " (" + tname + " must be " + std::string(name(want)) + ")");
        }

        void check_epsilon(float eps, const char* op)
        {
            if (!std::isfinite(eps) || eps < 0)
                fail(op, "epsilon must be finite and >= 0, got " + std::to_string(eps));
        }

        void check_device(const tensor& x, const tensor& t, const char* tname, const char* op)
        {
            if (t.defined() && t.device() != x.device())
                fail(op,
                     std::string(tname) + " is on " + to_string(t.device()) + " but x is on " + to_string(x.device()));
        }
    }

    batch_norm_layout bn_layout_of(const tensor& x, const std::string& data_format)
    {
        const format_info f = format_of(data_format);
        batch_norm_layout l;
        l.channels_last = f.channels_last;
        l.rank = f.rank;
        l.channel_dim = f.channels_last ? f.rank - 1 : 1;
        const auto& s = x.shape();
        l.C = s[static_cast<std::size_t>(l.channel_dim)];
        l.outer = 1;
        l.inner = 1;
        for (std::int64_t d = 0; d < l.rank; ++d)
        {
            if (d == l.channel_dim)
                continue;
            (d < l.channel_dim ? l.outer : l.inner) *= s[static_cast<std::size_t>(d)];
        }
        return l;
    }

    batch_norm_layout check_bn_grad_args(const tensor& dy, const tensor& x,
                                         const std::vector<std::pair<const char*, tensor>>& per_channel,
                                         const batch_norm_attrs& attrs, bn_formats formats, const char* op,
                                         const char* dy_name)
    {
        // TensorFlow's rank message describes its reserve spaces.
        auto rank_name = [](const std::string& n) {
            return n == tensorflow_grad_names.saved_mean  ? std::string("saved mean (reserve_space_1)")
                   : n == tensorflow_grad_names.saved_var ? std::string("saved variance (reserve_space_2)")
                                                          : n;
        };
        const std::string dyn = dy_name;
        if (!dy.defined() || !x.defined())
            fail(op, dyn + " and x must be defined tensors");
        // 1. ranks
        check_rank_4_or_5(dy, dy_name, op);
        check_rank_4_or_5(x, "x", op);
        // 2. rank implied by data_format
        check_format(x, attrs, formats == bn_formats::four_d, op);
        if (dy.dim() != x.dim())
            fail(op, "x and " + dyn + " must have same shape, but x has shape " + shape_to_string(x.shape()) + " and " +
                         dyn + " has shape " + shape_to_string(dy.shape()));
        // 3. per-channel tensors are 1-D
        for (const auto& [n, t] : per_channel)
            check_1d(t, rank_name(n).c_str(), op);
        // 4. same shapes
        if (x.shape() != dy.shape())
            fail(op, "x and " + dyn + " must have same shape, but x has shape " + shape_to_string(x.shape()) + " and " +
                         dyn + " has shape " + shape_to_string(dy.shape()));
        // 5. lengths
        const batch_norm_layout layout = bn_layout_of(x, attrs.data_format);
        for (const auto& [n, t] : per_channel)
            check_length(t, n, layout.C, op);
        // 6. zero channels
        if (layout.C == 0)
            fail(op, "x has zero channels (shape " + shape_to_string(x.shape()) + ", data_format " + attrs.data_format +
                         ")");
        // 7. dtypes
        check_io_dtype(x, op);
        if (dy.dtype() != x.dtype())
            fail(op, dyn + " has dtype " + std::string(name(dy.dtype())) + " but x has dtype " +
                         std::string(name(x.dtype())));
        for (const auto& [n, t] : per_channel)
            check_stats_dtype(x, t, n, op);
        // 8. epsilon
        check_epsilon(attrs.epsilon, op);
        // 9. devices
        check_device(x, dy, dy_name, op);
        for (const auto& [n, t] : per_channel)
            check_device(x, t, n, op);
        return layout;
    }

    batch_norm_layout check_bn_grad(const tensor& dy, const tensor& x, const tensor& scale, const tensor& saved_mean,
                                    const tensor& saved_var, const batch_norm_attrs& attrs, const char* op,
                                    bn_formats formats, const bn_grad_names& names)
    {
        return check_bn_grad_args(dy, x,
                                  {{"scale", scale}, {names.saved_mean, saved_mean}, {names.saved_var, saved_var}},
                                  attrs, formats, op, names.dy);
    }

    batch_norm_layout check_bn_input(const tensor& x, const batch_norm_attrs& attrs, const char* op)
    {
        if (!x.defined())
            fail(op, "x must be a defined tensor");
        check_rank_4_or_5(x, "x", op);
        check_format(x, attrs, false, op);
        const batch_norm_layout layout = bn_layout_of(x, attrs.data_format);
        if (layout.C == 0)
            fail(op, "x has zero channels (shape " + shape_to_string(x.shape()) + ", data_format " + attrs.data_format +
                         ")");
        check_io_dtype(x, op);
        return layout;
    }

    batch_norm_layout check_bn_forward(const tensor& x, const tensor& scale, const tensor& offset, const tensor& mean,
                                       const tensor& variance, const batch_norm_attrs& attrs, const char* op)
    {
        if (!x.defined())
            fail(op, "x must be a defined tensor");
        check_rank_4_or_5(x, "x", op);
        check_format(x, attrs, false, op);
        check_1d(scale, "scale", op);
        check_1d(offset, "offset", op);
        check_1d(mean, "mean", op);
        check_1d(variance, "variance", op);
        const batch_norm_layout layout = bn_layout_of(x, attrs.data_format);
        check_length(scale, "scale", layout.C, op);
        check_length(offset, "offset", layout.C, op);
        const bool reads_stats = !attrs.is_training || attrs.exponential_avg_factor != 1.0f;
        if (reads_stats)
        {
            const char* prefix = attrs.is_training ? "When exponential_avg_factor != 1, " : "When is_training=false, ";
            check_length(mean, "mean", layout.C, op, prefix);
            check_length(variance, "variance", layout.C, op, prefix);
        }
        if (layout.C == 0)
            fail(op, "x has zero channels (shape " + shape_to_string(x.shape()) + ", data_format " + attrs.data_format +
                         ")");
        check_io_dtype(x, op);
        check_stats_dtype(x, scale, "scale", op);
        check_stats_dtype(x, offset, "offset", op);
        if (reads_stats || mean.numel() > 0)
            check_stats_dtype(x, mean, "mean", op);
        if (reads_stats || variance.numel() > 0)
            check_stats_dtype(x, variance, "variance", op);
        check_epsilon(attrs.epsilon, op);
        if (!std::isfinite(attrs.exponential_avg_factor) || attrs.exponential_avg_factor < 0 ||
            attrs.exponential_avg_factor > 1)
            fail(op, "exponential_avg_factor must be in [0, 1], got " + std::to_string(attrs.exponential_avg_factor));
        check_device(x, scale, "scale", op);
        check_device(x, offset, "offset", op);
        check_device(x, mean, "mean", op);
        check_device(x, variance, "variance", op);
        return layout;
    }

    void check_bn_same(const batch_norm_layout& layout, const tensor& x,
                       const std::vector<std::pair<const char*, tensor>>& xs,
                       const std::vector<std::pair<const char*, tensor>>& vs, const char* op)
    {
        for (const auto& [tname, t] : xs)
        {
            if (!t.defined() || t.shape() != x.shape() || t.dtype() != x.dtype())
                fail(op, std::string(tname) + " must have x's shape " + shape_to_string(x.shape()) + " and dtype " +
                             std::string(name(x.dtype())) + ", got " +
                             (t.defined() ? shape_to_string(t.shape()) + " " + std::string(name(t.dtype()))
                                          : std::string("(undefined)")));
            check_device(x, t, tname, op);
        }
        for (const auto& [tname, t] : vs)
        {
            check_1d(t, tname, op);
            check_length(t, tname, layout.C, op);
            check_stats_dtype(x, t, tname, op);
            check_device(x, t, tname, op);
        }
    }
}

namespace xgrad
{
    dtype batch_norm_stats_dtype(dtype xdt) noexcept { return xdt == dtype::float64 ? dtype::float64 : dtype::float32; }

    shape_type batch_norm_layout::channel_shape() const
    {
        shape_type s(static_cast<std::size_t>(rank), 1);
        s[static_cast<std::size_t>(channel_dim)] = C;
        return s;
    }

    axes_type batch_norm_layout::reduce_axes() const
    {
        axes_type axes;
        for (std::int64_t d = 0; d < rank; ++d)
            if (d != channel_dim)
                axes.push_back(d);
        return axes;
    }

    batch_norm_layout check_batch_norm_forward(const tensor& x, const tensor& scale, const tensor& offset,
                                               const batch_norm_attrs& attrs, const char* op)
    {
        batch_norm_attrs training = attrs;
        training.is_training = true;
        training.exponential_avg_factor = 1.0f;
        const dtype sdt = batch_norm_stats_dtype(x.defined() ? x.dtype() : dtype::float32);
        const tensor no_stats = zeros({0}, sdt, x.defined() ? x.device() : cpu_device);
        return detail::check_bn_forward(x, scale, offset, no_stats, no_stats, training, op);
    }
}
