// The TensorFlow compatibility layer (xgrad/compat/tensorflow.hpp): each op class checks that its
// inputs are on the scope's device, translates its Attrs into xgrad::batch_norm_attrs, and calls
// the core function under the scope's recording setting, with TensorFlow's op and argument names
// for its messages (the core functions take them for this layer: batch_norm_internal.hpp). No
// arithmetic happens here, which is why the outputs are those of the core functions bit for bit.
// TensorFlow's empty outputs (reserve_space_3 of the forward, the gradients' last two) are
// made here: xgrad's own functions have no such outputs.
#include "xgrad/compat/tensorflow.hpp"

#include <algorithm>
#include <cctype>
#include <charconv>
#include <string>
#include <system_error>
#include <utility>

#include "core/src/ops/batch_norm_internal.hpp"
#include "xgrad/autograd.hpp"
#include "xgrad/errors.hpp"
#include "xgrad/factories.hpp"
#include "xgrad/ops/batch_norm.hpp"

namespace xgrad::compat::tensorflow
{
    namespace
    {
        /// One of TensorFlow's empty outputs: [0], the statistics dtype, on x's device.
        tensor empty_output(const tensor& x) { return zeros({0}, batch_norm_stats_dtype(x.dtype()), x.device()); }

        /// Throws xgrad::invalid_argument when `t` is defined and not on the scope's device. The
        /// core functions only check that the inputs agree with one another; a scope fixes the
        /// device in advance, so a whole set of inputs on another device is an error too.
        /// Undefined tensors (the optional inputs some ops accept) are not checked.
        void check_device(const Scope& scope, const tensor& t, const char* op, const char* input)
        {
            if (t.defined() && t.device() != scope.device())
                throw xgrad::invalid_argument(std::string(op) + ": " + input + " is on " + to_string(t.device()) +
                                              " but the scope's device is " + to_string(scope.device()));
        }

        batch_norm_attrs core_attrs(const ops::detail::fused_batch_norm_grad_attrs& attrs)
        {
            batch_norm_attrs a;
            a.epsilon = attrs.epsilon_;
            a.data_format = attrs.data_format_;
            a.is_training = attrs.is_training_;
            return a;
        }
    }

    // --- Scope ---------------------------------------------------------------------------------

    Scope::Scope(xgrad::device dev, bool records_gradients) noexcept
        : m_device(dev), m_records_gradients(records_gradients)
    {
    }

    Scope Scope::NewRootScope() noexcept { return Scope(cpu_device, true); }

    Scope Scope::WithDevice(xgrad::device dev) const noexcept
    {
        Scope s = *this;
        s.m_device = dev;
        return s;
    }

    namespace
    {
        /// TensorFlow's device names: "/device:CPU:0", "/cpu:0", "/device:GPU:1", "/gpu:1",
        /// optionally after "/job:.../replica:.../task:..." parts, the type in any case. The
        /// one CPU is index 0; GPU n is cuda:n.
        device parse_tensorflow_device(std::string_view text)
        {
            const auto refuse = [&](const std::string& why) -> device {
                throw xgrad::invalid_argument("unknown device '" + std::string(text) + "': " + why);
            };
            std::string_view spec;
            for (std::size_t at = 1; at <= text.size();)
            {
                const std::size_t next = std::min(text.find('/', at), text.size());
                const std::string_view part = text.substr(at, next - at);
                if (part.substr(0, 4) != "job:" && part.substr(0, 8) != "replica:" && part.substr(0, 5) != "task:")
                {
                    if (!spec.empty() || next != text.size())
                        return refuse("the device must be the last part of a TensorFlow device name");
                    spec = part.substr(0, 7) == "device:" ? part.substr(7) : part;
                }
                at = next + 1;
            }
            const std::size_t colon = spec.find(':');
            std::string type(spec.substr(0, colon));
            for (char& c : type)
                c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
            int index = -1;
            if (colon != std::string_view::npos)
            {
                const std::string_view digits = spec.substr(colon + 1);
                const auto [end, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), index);
                if (digits.empty() || ec != std::errc() || end != digits.data() + digits.size())
                    index = -1;
            }
            if (index < 0)
                return refuse("expected a TensorFlow device such as '/device:CPU:0' or '/device:GPU:0'");
            if (type == "CPU")
                return index == 0 ? cpu_device : refuse("xgrad has one CPU device, '/device:CPU:0'");
            if (type == "GPU")
                return device{device_type::cuda, index};
            return refuse("device type '" + type + "' is not one xgrad has (CPU, GPU)");
        }
    }

    Scope Scope::WithDevice(std::string_view text) const
    {
        return WithDevice(!text.empty() && text[0] == '/' ? parse_tensorflow_device(text) : parse_device(text));
    }

    Scope Scope::WithGradientRecording(bool enabled) const noexcept
    {
        Scope s = *this;
        s.m_records_gradients = enabled;
        return s;
    }

    namespace ops
    {
        // --- Attrs setters: modified copies, so that a chain never changes its source ----------

        namespace
        {
            /// A copy of `attrs` with one member set to `value`.
            template <class A, class M, class V>
            A with_member(const A& attrs, M A::*member, V&& value)
            {
                A r = attrs;
                r.*member = std::forward<V>(value);
                return r;
            }
        }

        FusedBatchNormV3::Attrs FusedBatchNormV3::Attrs::Epsilon(float x) const
        {
            return with_member(*this, &FusedBatchNormV3::Attrs::epsilon_, x);
        }

        FusedBatchNormV3::Attrs FusedBatchNormV3::Attrs::ExponentialAvgFactor(float x) const
        {
            return with_member(*this, &FusedBatchNormV3::Attrs::exponential_avg_factor_, x);
        }

        FusedBatchNormV3::Attrs FusedBatchNormV3::Attrs::DataFormat(std::string_view x) const
        {
            return with_member(*this, &FusedBatchNormV3::Attrs::data_format_, std::string(x));
        }

        FusedBatchNormV3::Attrs FusedBatchNormV3::Attrs::IsTraining(bool x) const
        {
            return with_member(*this, &FusedBatchNormV3::Attrs::is_training_, x);
        }

        detail::fused_batch_norm_grad_attrs detail::fused_batch_norm_grad_attrs::Epsilon(float x) const
        {
            return with_member(*this, &detail::fused_batch_norm_grad_attrs::epsilon_, x);
        }

        detail::fused_batch_norm_grad_attrs detail::fused_batch_norm_grad_attrs::DataFormat(std::string_view x) const
        {
            return with_member(*this, &detail::fused_batch_norm_grad_attrs::data_format_, std::string(x));
        }

        detail::fused_batch_norm_grad_attrs detail::fused_batch_norm_grad_attrs::IsTraining(bool x) const
        {
            return with_member(*this, &detail::fused_batch_norm_grad_attrs::is_training_, x);
        }

        // --- FusedBatchNormV3 ------------------------------------------------------------------

        FusedBatchNormV3::FusedBatchNormV3(const Scope& scope, const tensor& x, const tensor& scale,
                                           const tensor& offset, const tensor& mean, const tensor& variance)
            : FusedBatchNormV3(scope, x, scale, offset, mean, variance, Attrs())
        {
        }

        FusedBatchNormV3::FusedBatchNormV3(const Scope& scope, const tensor& x, const tensor& scale,
                                           const tensor& offset, const tensor& mean, const tensor& variance,
                                           const Attrs& attrs)
        {
            // The same name as the core function uses in its messages, so that every error of
            // this op, device or contract, starts the same way.
            const char* op = "FusedBatchNormV3";
            check_device(scope, x, op, "x");
            check_device(scope, scale, op, "scale");
            check_device(scope, offset, op, "offset");
            check_device(scope, mean, op, "mean");
            check_device(scope, variance, op, "variance");
            batch_norm_attrs a;
            a.epsilon = attrs.epsilon_;
            a.data_format = attrs.data_format_;
            a.is_training = attrs.is_training_;
            a.exponential_avg_factor = attrs.exponential_avg_factor_;
            grad_mode_guard recording(scope.records_gradients());
            batch_norm_forward_result r = xgrad::detail::fused_batch_norm(x, scale, offset, mean, variance, a, op);
            y = std::move(r.y);
            batch_mean = std::move(r.running_mean);
            batch_variance = std::move(r.running_var);
            reserve_space_1 = std::move(r.saved_mean);
            reserve_space_2 = std::move(r.saved_var);
            reserve_space_3 = empty_output(x);
        }

        // --- FusedBatchNormGradV3 --------------------------------------------------------------

        FusedBatchNormGradV3::FusedBatchNormGradV3(const Scope& scope, const tensor& y_backprop, const tensor& x,
                                                   const tensor& scale, const tensor& reserve_space_1,
                                                   const tensor& reserve_space_2, const tensor& reserve_space_3)
            : FusedBatchNormGradV3(scope, y_backprop, x, scale, reserve_space_1, reserve_space_2, reserve_space_3,
                                   Attrs())
        {
        }

        FusedBatchNormGradV3::FusedBatchNormGradV3(const Scope& scope, const tensor& y_backprop, const tensor& x,
                                                   const tensor& scale, const tensor& reserve_space_1,
                                                   const tensor& reserve_space_2, const tensor& reserve_space_3,
                                                   const Attrs& attrs)
        {
            const char* op = "FusedBatchNormGradV3";
            check_device(scope, y_backprop, op, "y_backprop");
            check_device(scope, x, op, "x");
            check_device(scope, scale, op, "scale");
            check_device(scope, reserve_space_1, op, "reserve_space_1");
            check_device(scope, reserve_space_2, op, "reserve_space_2");
            check_device(scope, reserve_space_3, op, "reserve_space_3");
            grad_mode_guard recording(scope.records_gradients());
            // reserve_space_3 is accepted with any shape and ignored, as TensorFlow's CPU kernel does.
            batch_norm_grad_result r = xgrad::detail::fused_batch_norm_grad(
                y_backprop, x, scale, reserve_space_1, reserve_space_2, core_attrs(attrs),
                xgrad::detail::bn_formats::all, xgrad::detail::tensorflow_grad_names, op);
            x_backprop = std::move(r.dx);
            scale_backprop = std::move(r.dscale);
            offset_backprop = std::move(r.doffset);
            reserve_space_4 = empty_output(x);
            reserve_space_5 = empty_output(x);
        }

        // --- FusedBatchNormGradV2 --------------------------------------------------------------

        FusedBatchNormGradV2::FusedBatchNormGradV2(const Scope& scope, const tensor& y_backprop, const tensor& x,
                                                   const tensor& scale, const tensor& reserve_space_1,
                                                   const tensor& reserve_space_2)
            : FusedBatchNormGradV2(scope, y_backprop, x, scale, reserve_space_1, reserve_space_2, Attrs())
        {
        }

        FusedBatchNormGradV2::FusedBatchNormGradV2(const Scope& scope, const tensor& y_backprop, const tensor& x,
                                                   const tensor& scale, const tensor& reserve_space_1,
                                                   const tensor& reserve_space_2, const Attrs& attrs)
        {
            const char* op = "FusedBatchNormGradV2";
            check_device(scope, y_backprop, op, "y_backprop");
            check_device(scope, x, op, "x");
            check_device(scope, scale, op, "scale");
            check_device(scope, reserve_space_1, op, "reserve_space_1");
            check_device(scope, reserve_space_2, op, "reserve_space_2");
            grad_mode_guard recording(scope.records_gradients());
            batch_norm_grad_result r = xgrad::detail::fused_batch_norm_grad(
                y_backprop, x, scale, reserve_space_1, reserve_space_2, core_attrs(attrs),
                xgrad::detail::bn_formats::four_d, xgrad::detail::tensorflow_grad_names, op);
            x_backprop = std::move(r.dx);
            scale_backprop = std::move(r.dscale);
            offset_backprop = std::move(r.doffset);
            reserve_space_3 = empty_output(x);
            reserve_space_4 = empty_output(x);
        }
    }
}
