"""A module that starts a thread when imported: a zygote must refuse to fork from it."""
from __future__ import annotations

import threading
import time

threading.Thread(target=time.sleep, args=(30,), daemon=True).start()
