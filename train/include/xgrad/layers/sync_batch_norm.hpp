#pragma once
// Kept so that existing includes compile: nn::sync_batch_norm2d is declared with its op in
// xgrad/distributed/sync_batch_norm.hpp.
#include "xgrad/distributed/sync_batch_norm.hpp"
