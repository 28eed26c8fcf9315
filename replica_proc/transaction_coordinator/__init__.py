"""The transaction coordinator and what it stores in ``__transaction_state``.
"""
