"""The Trio service: WebSocket sessions as actors over the sans-IO core, Triton behind them."""
