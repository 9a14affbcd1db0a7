"""The request pipeline and tensors: requests and responses, admission and delivery, validation, data types, classification, the response cache, batching helpers and request-body memory."""
