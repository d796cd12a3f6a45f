"""Who is asking: authentication (browser sessions, API tokens, websockets), the composer and
approver roles, and the account page where people manage their API tokens."""
