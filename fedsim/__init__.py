"""fedsim: a federated-learning simulator for personalized-FL research."""

__version__ = "0.1.0"
