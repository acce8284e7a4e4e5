// `ember tokenizer encode` and `ember tokenizer decode`: text <-> token ids for scripts and checks.
#include "app/commands.h"
#include "core/error.h"

namespace ember {

int cmd_tokenizer_encode(int, char**) { throw_error("ember tokenizer encode is not built yet", "use ember prep"); }

int cmd_tokenizer_decode(int, char**) { throw_error("ember tokenizer decode is not built yet", "use ember prep"); }

}  // namespace ember
