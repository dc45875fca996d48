#pragma once
// xgrad::Scope: the execution context that the op classes of xgrad::ops (xgrad/ops/nn_ops.hpp)
// take as their first argument, in the shape of TensorFlow's C++ `Scope`.
//
// xgrad runs ops eagerly (define-by-run), so a scope holds no graph. It carries two settings:
//   - the device the op runs on. Every input of an op built with the scope must live there,
//     else the op throws xgrad::invalid_argument naming both devices. Nothing is copied
//     between devices implicitly.
//   - whether the op records itself for autograd. An op built with the scope runs under
//     grad_mode_guard(records_gradients()): with recording on it records even inside a
//     no_grad block; with recording off its outputs never require grad. The thread's grad
//     mode is restored when the op returns.
//
// A scope is a small value: the With* methods return a modified copy and leave the original
// as it was, so they chain:
//
//     auto scope = xgrad::Scope::NewRootScope().WithDevice(xgrad::cpu_device).WithGradientRecording(false);
#include <string>
#include <string_view>

#include "xgrad/dtype.hpp"
#include "xgrad/errors.hpp"
#include "xgrad/tensor.hpp"

namespace xgrad
{
    class Scope
    {
    public:
        /// The root scope: CPU device, gradient recording on.
        static Scope NewRootScope() noexcept { return Scope(cpu_device, true); }

        /// A copy of this scope whose ops run on `dev`.
        [[nodiscard]] Scope WithDevice(xgrad::device dev) const noexcept
        {
            Scope s = *this;
            s.m_device = dev;
            return s;
        }
        /// A copy of this scope whose ops run on the device named by `text` ("cpu", "cuda",
        /// "cuda:1"); throws std::invalid_argument naming the text when it names none.
        [[nodiscard]] Scope WithDevice(std::string_view text) const { return WithDevice(parse_device(text)); }

        /// A copy of this scope whose ops record themselves for autograd (or not).
        [[nodiscard]] Scope WithGradientRecording(bool enabled) const noexcept
        {
            Scope s = *this;
            s.m_records_gradients = enabled;
            return s;
        }

        xgrad::device device() const noexcept { return m_device; }
        bool records_gradients() const noexcept { return m_records_gradients; }

        /// Throws xgrad::invalid_argument when `t` is defined and not on this scope's device.
        /// `op` and `input` name the op and the input in the message. Undefined tensors (the
        /// optional inputs some ops accept) are not checked.
        void check_device(const tensor& t, std::string_view op, std::string_view input) const
        {
            if (t.defined() && t.device() != m_device)
                throw xgrad::invalid_argument(std::string(op) + ": " + std::string(input) + " is on " +
                                              to_string(t.device()) + " but the scope's device is " +
                                              to_string(m_device));
        }

    private:
        Scope(xgrad::device dev, bool records_gradients) noexcept
            : m_device(dev), m_records_gradients(records_gradients)
        {
        }

        xgrad::device m_device;
        bool m_records_gradients;
    };
}
