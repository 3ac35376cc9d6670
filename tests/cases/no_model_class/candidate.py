"""Defines neither ModelNew nor Model."""
import torch

x = 1
