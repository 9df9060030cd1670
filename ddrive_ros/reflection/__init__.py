"""Safety-guided reflection: check a plan against limits, its meta behaviour and the scene, and search for safe anchors."""
