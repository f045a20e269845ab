"""`python -m kvspec.proofs [--bound N] [--json FILE] [--no-vllm]`."""

import sys

from kvspec.proofs.runner import main

sys.exit(main())
