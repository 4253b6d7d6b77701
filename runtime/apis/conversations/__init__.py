"""The Conversations API: durable, ordered lists of items that responses read and extend."""
