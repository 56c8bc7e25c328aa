// The whole public API of qkv, floor by floor (docs/ARCHITECTURE.md): tensors and devices, ops and
// reverse mode, modules, models and their files, decoding, training, text, pictures.
#pragma once

#include "qkv/core/device.h"
#include "qkv/core/parallel.h"
#include "qkv/core/rng.h"
#include "qkv/core/tensor.h"
#include "qkv/io/safetensors.h"
#include "qkv/ops.h"
#include "qkv/nn/gpt.h"
#include "qkv/nn/init.h"
#include "qkv/nn/linear.h"
#include "qkv/nn/module.h"
#include "qkv/nn/multihead_attention.h"
#include "qkv/nn/transformer.h"
#include "qkv/models/load.h"
#include "qkv/models/model.h"
#include "qkv/models/model_file.h"
#include "qkv/models/registry.h"
#include "qkv/decode/generate.h"
#include "qkv/decode/search.h"
#include "qkv/decode/translator.h"
