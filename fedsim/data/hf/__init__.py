"""``data.name=hf:<path>``: Hugging Face data, from a local folder or file (or, online, a Hub
id) to fedsim's in-memory datasets.

- ``open.py``: the source (``HFSource``) and its split opened with ``datasets``;
- ``columns.py`` / ``images.py``: labels, numeric and group columns read from Arrow; images;
- ``text.py`` / ``instruct.py``: a text column tokenized for a pretrained language model;
  prompt / response pairs (instruction data);
- ``cache.py``: each conversion cached under ``data.root`` once its run is accepted;
- ``load.py``: the one entry (``load_hf``, ``hf_source``, ``accept``) that ties them.
"""

from fedsim.data.hf.load import HFData, accept, hf_source, is_hf_name, load_hf
from fedsim.data.hf.open import HFSource

__all__ = ["HFData", "HFSource", "accept", "hf_source", "is_hf_name", "load_hf"]
