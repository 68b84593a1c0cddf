"""The pure decisions of a pass: from what it saw to what is to be done. No Kubernetes client, no asyncio."""
