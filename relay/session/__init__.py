"""The session loop and its seam: the loop, the transport interface, the handshake's view, access, policy, the handler runner."""
