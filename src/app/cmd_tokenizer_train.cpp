// `ember tokenizer train`: a byte-level BPE tokenizer trained on a corpus, written as Hugging Face files.
#include "app/commands.h"
#include "core/error.h"

namespace ember {

int cmd_tokenizer_train(int, char**) { throw_error("ember tokenizer train is not built yet", "use --tokenizer bytes"); }

}  // namespace ember
