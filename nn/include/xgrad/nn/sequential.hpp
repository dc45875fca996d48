#pragma once
// xgrad::nn::sequential: modules applied one after the other (nn/src/sequential.cpp).
// Children are named by the caller ("conv1", "bn1", ...) or by their position ("0", "1", ...),
// so parameters are listed as "conv1.weight".
//
// A sequential knows nothing of its children's classes. A run of consecutive children may be
// given one fused forward (fuse_children), which forward then calls in place of the children's
// own; nn::fuse (xgrad/nn/fuse.hpp) is the pass that finds the runs xgrad has fused ops for.
#include <cstddef>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "xgrad/nn/module.hpp"

namespace xgrad::nn
{
    class sequential final : public module
    {
    public:
        /// A forward standing for a run of children: the same function of the input as the
        /// children applied in turn (its values and gradients; rounding may differ).
        using fused_forward_type = std::function<tensor(const tensor&)>;
        /// A run of children [first, first + count) with its fused forward.
        struct fused_group
        {
            std::size_t first = 0;
            std::size_t count = 0;
            fused_forward_type forward;
        };

        sequential() = default;

        /// Appends `m` under `name`; returns it, for chaining configuration. Throws
        /// xgrad::invalid_argument (through module's registration rules) on a bad or repeated
        /// name or a null module. The new child is not fused.
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

        /// Applies every child in order; a fused group's children as one call of its forward.
        /// Throws xgrad::invalid_argument when empty; an error in a child is rethrown with the
        /// child's name in front of the message ("sequential: in 'bn1': ..."), an error in a
        /// fused group with the names of its children ("in 'bn1' + 'relu1' + 'pool1'").
        tensor forward(const tensor& x) override;
        std::string_view type_name() const noexcept override { return "sequential"; }

        // --- fusion --------------------------------------------------------------------------
        /// From now on forward runs children [first, first + count) as one call of `forward`.
        /// Parameters, buffers, state_dict and describe() are unchanged: the children stay, and
        /// are what `forward` computes with. Throws xgrad::invalid_argument when count < 2, the
        /// run goes past the last child, it overlaps a group already fused, or forward is empty.
        void fuse_children(std::size_t first, std::size_t count, fused_forward_type forward);
        /// Drops every fused group: forward calls each child again.
        void unfuse() noexcept { m_fused.clear(); }
        /// The fused groups, in child order.
        const std::vector<fused_group>& fused_groups() const noexcept { return m_fused; }

    protected:
        /// A replaced child leaves the fused group it was in (the group's forward calls the
        /// old child); the other groups stay.
        void child_replaced(const std::string& name, const std::shared_ptr<module>& child) override;

    private:
        std::vector<fused_group> m_fused; // sorted by first, disjoint
    };

    /// Number of scalar parameters of m (recursively).
    std::int64_t count_parameters(const module& m);
}
