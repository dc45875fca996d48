#pragma once
// xgrad::nn::sequential: modules applied one after the other (layers/src/layers.cpp).
// Children are named by the caller ("conv1", "bn1", ...) or by their position ("0", "1", ...),
// so parameters are listed as "conv1.weight".
#include <memory>
#include <string>

#include "xgrad/layers/module.hpp"

namespace xgrad::nn
{
    class sequential final : public module
    {
    public:
        sequential() = default;

        /// Appends `m` under `name`; returns it, for chaining configuration. Throws
        /// xgrad::invalid_argument (through module's registration rules) on a bad or repeated
        /// name or a null module.
        template <class M>
        std::shared_ptr<M> add(std::string name, std::shared_ptr<M> m)
        {
            register_module(std::move(name), m);
            return m;
        }
        /// Appends `m` under its position as name.
        template <class M>
        std::shared_ptr<M> add(std::shared_ptr<M> m)
        {
            return add(std::to_string(named_children().size()), std::move(m));
        }

        /// Applies every child in order. Throws xgrad::invalid_argument when empty; an error in a
        /// child is rethrown with the child's name in front of the message.
        ///
        /// ReLU fusion: a batch_norm2d or batch_norm3d child directly followed by an nn::relu
        /// child runs as one call of the batch-norm child's forward_relu (one fused op,
        /// xgrad::fused_batch_norm_relu), and the relu child is skipped. The outputs, gradients
        /// of every order and running statistics are those of calling the two children in
        /// turn (up to floating-point rounding); parameters, buffers, state_dict and describe()
        /// are unchanged. Errors then name the batch-norm child.
        ///
        /// Pooling fusion: a batch_norm2d child followed by nn::relu and nn::max_pool2d children
        /// of the same data_format runs as one call of batch_norm2d::forward_relu_max_pool
        /// (xgrad::fused_batch_norm_relu_max_pool2d): the values and first-order gradients are
        /// bit for bit those of the ReLU fusion above followed by the pool (so those of the
        /// three children in turn up to rounding), the higher orders equal to rounding, and
        /// the backward does not read the full-size activation.
        /// Errors then name the three children ("in 'bn1' + 'relu1' + 'pool1'").
        tensor forward(const tensor& x) override;
        std::string_view type_name() const noexcept override { return "sequential"; }
    };

    /// Number of scalar parameters of m (recursively).
    std::int64_t count_parameters(const module& m);
}
