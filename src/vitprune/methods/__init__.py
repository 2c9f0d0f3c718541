"""Pruning methods built on vitprune's surgery, training and measurement (one sub-package per method)."""
