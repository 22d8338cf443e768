"""An example of extending fedsim without editing it: a model, a dataset and an algorithm.

Put the folder holding this package (``examples/``) on ``PYTHONPATH`` and name them by
import path in a config or on the command line::

    PYTHONPATH=examples fedsim run configs/quickstart.yaml \\
        model.name=fedsim_plugins.nets:TinyMLP \\
        data.name=fedsim_plugins.data:mnist_14px \\
        algorithm.name=fedsim_plugins.algos:FedMedian

The Ray executor ships this package to its workers by itself.
"""
