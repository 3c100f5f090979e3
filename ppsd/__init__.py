"""ppsd: will early-exit self-speculative decoding pay off on this model and hardware?"""

__version__ = "0.1.0"
