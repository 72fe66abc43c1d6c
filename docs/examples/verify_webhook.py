"""A webhook receiver that checks Shoal's signature (docs/guides/notifications.md).

Run it with the webhook's secret, then register http://127.0.0.1:9000/ as a webhook:

    SHOAL_WEBHOOK_SECRET=... python3 verify_webhook.py
"""

import hashlib
import hmac
import json
import os
import time
from http.server import BaseHTTPRequestHandler, HTTPServer


def verify(secret: str, body: bytes, header: str, tolerance: float = 300) -> bool:
    """Whether `header` (Shoal-Signature) signs `body` with `secret`, and is recent."""
    parts = [p.split("=", 1) for p in header.split(",") if "=" in p]
    t = next((v for k, v in parts if k.strip() == "t"), "")
    if not t.isdigit() or abs(time.time() - int(t)) > tolerance:
        return False
    mac = hmac.new(secret.encode(), t.encode() + b"." + body, hashlib.sha256).hexdigest()
    return any(v.isascii() and hmac.compare_digest(mac, v) for k, v in parts if k.strip() == "v1")


class Receiver(BaseHTTPRequestHandler):
    seen: set[str] = set()  # notification ids handled: a try may repeat one

    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
        secret = os.environ["SHOAL_WEBHOOK_SECRET"]
        if not verify(secret, body, self.headers.get("Shoal-Signature", "")):
            self.send_response(401)
            self.end_headers()
            return
        self.send_response(204)  # answer at once; handle after
        self.end_headers()
        notification_id = self.headers["Shoal-Webhook-Id"]
        if notification_id not in self.seen:
            self.seen.add(notification_id)
            note = json.loads(body)
            print(note["type"], note.get("task", {}).get("url", ""))


if __name__ == "__main__":
    HTTPServer(("127.0.0.1", 9000), Receiver).serve_forever()
