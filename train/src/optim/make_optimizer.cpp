// make_optimizer and make_adamw (see optimizer.hpp, adam.hpp): the optimizers by name, for
// programs that take one on their command line.
#include <memory>
#include <string>

#include "checks.hpp"
#include "xgrad/errors.hpp"
#include "xgrad/optim/adagrad.hpp"
#include "xgrad/optim/adam.hpp"
#include "xgrad/optim/optimizer.hpp"
#include "xgrad/optim/rmsprop.hpp"
#include "xgrad/optim/sgd.hpp"

namespace xgrad::optim
{
    using namespace detail;

    std::unique_ptr<optimizer> make_adamw(nn::module& model, adam_options options)
    {
        return std::make_unique<adam>(model, options, true);
    }

    std::unique_ptr<optimizer> make_optimizer(const std::string& name, nn::module& model, double lr)
    {
        if (name == "sgd")
        {
            sgd_options o;
            o.lr = lr;
            o.momentum = 0.9;
            o.nesterov = true;
            return std::make_unique<sgd>(model, o);
        }
        if (name == "adam" || name == "adamw")
        {
            adam_options o;
            o.lr = lr;
            if (name == "adamw")
                o.weight_decay = 0.01;
            return std::make_unique<adam>(model, o, name == "adamw");
        }
        if (name == "rmsprop")
        {
            rmsprop_options o;
            o.lr = lr;
            return std::make_unique<rmsprop>(model, o);
        }
        if (name == "adagrad")
        {
            adagrad_options o;
            o.lr = lr;
            return std::make_unique<adagrad>(model, o);
        }
        throw xgrad::invalid_argument("make_optimizer: unknown optimizer " + quoted(name) +
                                      "; the choices are 'sgd', 'adam', 'adamw', 'rmsprop', 'adagrad'");
    }
}
