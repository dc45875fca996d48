// Layer, group and instance normalisation (xgrad/ops/norm.hpp) as the fused batch norm on a
// reshaped x. The reshape that makes the groups the batch norm's channels is [1, G, R, 1] in
// NCHW: outer 1, C = G groups, inner = the R values of a group, which is how the batch-norm
// kernels walk a channels-first tensor, so no copy is made for a contiguous x.
#include "xgrad/ops/norm.hpp"

#include <cmath>
#include <string>

#include "core/src/profiler/record.hpp"
#include "xgrad/checked.hpp"
#include "xgrad/errors.hpp"
#include "xgrad/factories.hpp"
#include "xgrad/ops/batch_norm.hpp"
#include "xgrad/ops/elementwise.hpp"
#include "xgrad/ops/shape.hpp"

namespace xgrad
{
    namespace
    {
        [[noreturn]] void fail(const char* op, const std::string& what)
        {
            throw xgrad::invalid_argument(std::string(op) + ": " + what);
        }

        void check_x(const tensor& x, std::int64_t min_rank, const char* op)
        {
            if (!x.defined())
                fail(op, "x is undefined");
            if (!is_floating(x.dtype()))
                fail(op, "x must be floating point, got " + std::string(name(x.dtype())));
            if (x.dim() < min_rank)
                fail(op, "x must have rank " + std::to_string(min_rank) + " or more, got shape " +
                             shape_to_string(x.shape()));
        }

        /// weight or bias (when given): `shape`, x's dtype and device.
        void check_affine(const tensor& t, const char* what, const shape_type& shape, const tensor& x, const char* op)
        {
            if (!t.defined())
                return;
            if (t.shape() != shape || t.dtype() != x.dtype() || t.device() != x.device())
                fail(op, std::string(what) + " must have shape " + shape_to_string(shape) + ", dtype " +
                             std::string(name(x.dtype())) + " and device " + to_string(x.device()) + " (x's), got " +
                             shape_to_string(t.shape()) + " " + std::string(name(t.dtype())) + " on " +
                             to_string(t.device()));
        }

        float check_eps(double eps, const char* op)
        {
            if (!(eps >= 0.0) || !std::isfinite(eps) || eps > 3.0e38)
                fail(op, "eps must be a finite number >= 0, got " + std::to_string(eps));
            return static_cast<float>(eps);
        }

        /// x viewed as [1, groups, per_group, 1], normalised per group, viewed back.
        tensor normalize_groups(const tensor& x, std::int64_t groups, float eps)
        {
            const std::int64_t per_group = groups > 0 ? x.numel() / groups : 0;
            batch_norm_attrs attrs;
            attrs.data_format = "NCHW";
            attrs.is_training = true;
            attrs.epsilon = eps;
            const dtype sdt = batch_norm_stats_dtype(x.dtype());
            const tensor ones_c = ones({groups}, sdt, x.device()), zeros_c = zeros({groups}, sdt, x.device());
            const tensor none = zeros({0}, sdt, x.device());
            const tensor y =
                fused_batch_norm(reshape(x, {1, groups, per_group, 1}), ones_c, zeros_c, none, none, attrs).y;
            return reshape(y, x.shape());
        }

        /// y * weight + bias, with weight and bias broadcast as `view`.
        tensor affine(tensor y, const tensor& weight, const tensor& bias, const shape_type& view)
        {
            if (weight.defined())
                y = y * reshape(weight, view);
            if (bias.defined())
                y = y + reshape(bias, view);
            return y;
        }
    }

    tensor layer_norm(const tensor& x, const shape_type& normalized_shape, const tensor& weight, const tensor& bias,
                      double eps)
    {
        XGRAD_PROFILE_OP("layer_norm");
        constexpr const char* op = "layer_norm";
        check_x(x, 1, op);
        const auto d = static_cast<std::int64_t>(normalized_shape.size());
        const bool trailing = d >= 1 && d <= x.dim() &&
                              shape_type(x.shape().end() - d, x.shape().end()) == normalized_shape;
        if (!trailing)
            fail(op, "normalized_shape " + shape_to_string(normalized_shape) +
                         " must be non-empty and equal the last dimensions of x, of shape " +
                         shape_to_string(x.shape()));
        check_affine(weight, "weight", normalized_shape, x, op);
        check_affine(bias, "bias", normalized_shape, x, op);
        const float e = check_eps(eps, op);
        if (x.numel() == 0)
            return affine(x * 0.0, weight, bias, normalized_shape); // nothing to normalise
        // (normalized_shape is x's trailing extents, so its product is no larger than x.numel().)
        const std::int64_t rows = x.numel() / numel_of(normalized_shape);
        return affine(normalize_groups(x, rows, e), weight, bias, normalized_shape);
    }

    tensor group_norm(const tensor& x, std::int64_t num_groups, const tensor& weight, const tensor& bias, double eps)
    {
        XGRAD_PROFILE_OP("group_norm");
        constexpr const char* op = "group_norm";
        check_x(x, 2, op);
        const std::int64_t n = x.size(0), c = x.size(1);
        if (num_groups < 1 || c % num_groups != 0)
            fail(op, "num_groups must be at least 1 and divide the " + std::to_string(c) + " channels of x, got " +
                         std::to_string(num_groups));
        check_affine(weight, "weight", {c}, x, op);
        check_affine(bias, "bias", {c}, x, op);
        const float e = check_eps(eps, op);
        shape_type view(static_cast<std::size_t>(x.dim()), 1);
        view[1] = c;
        const std::int64_t groups = checked_mul(n, num_groups, op);
        if (x.numel() == 0)
            return affine(x * 0.0, weight, bias, view);
        return affine(normalize_groups(x, groups, e), weight, bias, view);
    }

    tensor instance_norm(const tensor& x, const tensor& weight, const tensor& bias, double eps)
    {
        XGRAD_PROFILE_OP("instance_norm");
        check_x(x, 3, "instance_norm");
        try
        {
            return group_norm(x, x.size(1), weight, bias, eps);
        }
        catch (const xgrad::invalid_argument& e)
        {
            // The message names the function called.
            const std::string msg = e.what();
            throw xgrad::invalid_argument("instance_norm" + msg.substr(msg.find(':')));
        }
    }
}
