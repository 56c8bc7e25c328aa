// The MPI communicator (mpi.cpp), for world() alone; built only with -DQKV_MPI=ON.
#pragma once

#include "qkv/distributed/communicator.h"

namespace qkv::distributed {
#ifdef QKV_HAVE_MPI
Communicator& mpi_world();
#endif
}  // namespace qkv::distributed
