// nn::sequential: its children applied in order, runs of them through a fused forward.
#include "xgrad/nn/sequential.hpp"

#include <algorithm>
#include <string>
#include <utility>

#include "xgrad/errors.hpp"

namespace xgrad::nn
{
    tensor sequential::forward(const tensor& x)
    {
        const auto children = named_children();
        if (children.empty())
            fail("forward of an empty sequential");
        tensor y = x;
        auto group = m_fused.begin();
        for (std::size_t i = 0; i < children.size(); ++i)
        {
            std::string where = children[i].first; // the children an error is reported in
            try
            {
                if (group != m_fused.end() && group->first == i)
                {
                    // A hooked child needs its own output, which the fused op never forms:
                    // then the run's children are called one by one.
                    bool hooked = false;
                    for (std::size_t k = 0; k < group->count; ++k)
                        hooked = hooked || children[i + k].second->has_forward_hooks();
                    if (!hooked)
                    {
                        for (std::size_t k = 1; k < group->count; ++k)
                            where += "' + '" + children[i + k].first;
                        y = group->forward(y);
                        i += group->count - 1; // the group's other children are applied
                        ++group;
                        continue;
                    }
                    ++group;
                }
                y = (*children[i].second)(y);
            }
            catch (const std::invalid_argument& e) // xgrad::invalid_argument included
            {
                throw xgrad::invalid_argument("sequential: in '" + where + "': " + e.what());
            }
        }
        return y;
    }

    void sequential::fuse_children(std::size_t first, std::size_t count, fused_forward_type forward)
    {
        const std::size_t n = named_children().size();
        const std::string run = "children [" + std::to_string(first) + ", " + std::to_string(first + count) + ")";
        if (count < 2)
            fail("fuse_children: a fused group needs at least 2 children, got " + std::to_string(count));
        if (first >= n || count > n - first)
            fail("fuse_children: " + run + " go past the last child (" + std::to_string(n) + " children)");
        if (!forward)
            fail("fuse_children: the fused forward of " + run + " is empty");
        const auto at = std::lower_bound(m_fused.begin(), m_fused.end(), first,
                                         [](const fused_group& g, std::size_t f) { return g.first < f; });
        const bool overlaps_next = at != m_fused.end() && at->first < first + count;
        const bool overlaps_previous = at != m_fused.begin() && std::prev(at)->first + std::prev(at)->count > first;
        if (overlaps_next || overlaps_previous)
            fail("fuse_children: " + run + " overlap a group already fused (unfuse() first)");
        m_fused.insert(at, fused_group{first, count, std::move(forward)});
    }

    void sequential::child_replaced(const std::string& name, const std::shared_ptr<module>&)
    {
        const auto children = named_children();
        std::size_t index = 0;
        while (index < children.size() && children[index].first != name)
            ++index;
        m_fused.erase(
            std::remove_if(m_fused.begin(), m_fused.end(),
                           [&](const fused_group& g) { return index >= g.first && index < g.first + g.count; }),
            m_fused.end());
    }

    std::int64_t count_parameters(const module& m)
    {
        std::int64_t n = 0;
        for (const auto& p : m.parameters())
            n += p.numel();
        return n;
    }
}
