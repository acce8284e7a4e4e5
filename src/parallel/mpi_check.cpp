// MPI error texts for EMBER_MPI_CHECK (implementation).
#include "parallel/mpi_check.h"

namespace ember {

std::string mpi_error_string(int code) {
  char buf[MPI_MAX_ERROR_STRING];
  int len = 0;
  if (MPI_Error_string(code, buf, &len) != MPI_SUCCESS) return "MPI error " + std::to_string(code);
  return std::string(buf, len);
}

}  // namespace ember
