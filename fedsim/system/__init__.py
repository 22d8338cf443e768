"""Clients as they behave in deployment: device speeds, bandwidths and availability traces."""
