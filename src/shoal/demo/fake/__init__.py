"""The fake model server: every vendor protocol Shoal drives, played by the demo model's script."""
